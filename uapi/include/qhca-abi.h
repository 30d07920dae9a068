/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * qhca: the ABI between the emulated HCA (QEMU), its driver (kmod) and the
 * user-space provider.  This file is the single source of truth: the QEMU
 * device includes it, bindgen turns it into Rust for the driver and the
 * provider (uapi/src/bindings.rs, checked for drift by `cargo test`).
 *
 * Rules, as in include/uapi/rdma/mlx5-abi.h:
 *  - every field has an explicit width; the layout is identical on 32 and 64
 *    bit hosts; pointers travel as __u64;
 *  - all device-visible structures (registers, queue entries) are
 *    little-endian;
 *  - reserved fields must be zero; whoever reads a structure rejects unknown
 *    bits and non-zero reserved fields;
 *  - structures grow only at the end, announced by comp_mask/size; a breaking
 *    change bumps QHCA_ABI_VERSION.
 *
 * The spec that goes with it is qemu-device/docs/specs/qhca.rst.
 */
#ifndef QHCA_ABI_H
#define QHCA_ABI_H

#ifdef __KERNEL__
#include <linux/types.h>
#elif defined(QHCA_ABI_NO_LINUX_TYPES)
/*
 * Spelled exactly as <linux/types.h> spells them, so a file that sees both
 * (QEMU on a Linux host gets it through glibc) has two identical typedefs,
 * which C11 allows.
 */
typedef unsigned char __u8;
typedef unsigned short __u16;
typedef int __s32;
typedef unsigned int __u32;
typedef unsigned long long __u64;
#else
#include <linux/types.h>
#endif

/* Bumped on any incompatible change to anything in this file. */
/*
 * 2: packets carry their source; CQEs carry the WQE index; QPNs carry a
 *    generation; page lists are two-level; keys are never reused;
 *    asynchronous events reach user space.
 */
#define QHCA_ABI_VERSION 2

/* ------------------------------------------------------------------------ */
/* PCI identity                                                             */
/* ------------------------------------------------------------------------ */

/*
 * 1af4:10f0, from the range QEMU's docs/specs/pci-ids.rst sets aside for
 * experimental devices (1af4:10f0 to 1af4:10ff, no registration; an official
 * ID is needed before the device goes upstream or ships).  Class: network
 * controller, other (0x0280), as InfiniBand HCAs are.
 */
#define QHCA_PCI_VENDOR_ID 0x1af4
#define QHCA_PCI_DEVICE_ID 0x10f0
#define QHCA_PCI_REVISION  0x01
#define QHCA_PCI_CLASS     0x0280

/* BAR numbers. */
#define QHCA_BAR_REGS      0 /* control registers, 4 KiB, 32-bit MMIO */
#define QHCA_BAR_MSIX      1 /* MSI-X table and PBA */
#define QHCA_BAR_UAR       2 /* doorbell (UAR) pages, 64-bit, 4 KiB each */

#define QHCA_REGS_SIZE     0x1000
#define QHCA_UAR_PAGE_SHIFT 12
#define QHCA_UAR_PAGE_SIZE (1u << QHCA_UAR_PAGE_SHIFT)

/* MSI-X vectors.  Vector 0 serves the event queue. */
#define QHCA_MSIX_VECTORS  1
#define QHCA_MSIX_VEC_EQ   0

/* ------------------------------------------------------------------------ */
/* BAR0 register map.  All registers are 32 bits wide, little-endian, and    */
/* must be accessed with aligned 32-bit loads and stores; other accesses are */
/* ignored (reads return 0) and counted in QHCA_REG_GUEST_ERRORS.           */
/* ------------------------------------------------------------------------ */

#define QHCA_REG_MAGIC          0x000 /* RO: QHCA_MAGIC */
#define QHCA_REG_ABI_VERSION    0x004 /* RO: QHCA_ABI_VERSION */
#define QHCA_REG_CAPS_LO        0x008 /* RO: QHCA_CAP_* bits 31..0 */
#define QHCA_REG_CAPS_HI        0x00c /* RO: QHCA_CAP_* bits 63..32 */
#define QHCA_REG_NUM_UARS       0x010 /* RO: doorbell pages in BAR2 */
#define QHCA_REG_CMDQ_MAX_LOG   0x014 /* RO: largest CMDQ/EQ log2(entries) */
#define QHCA_REG_CTRL           0x018 /* RW: QHCA_CTRL_* */
#define QHCA_REG_STATUS         0x01c /* RO: QHCA_STATUS_* */
#define QHCA_REG_CMDQ_BASE_LO   0x020 /* RW while disabled: DMA address, 64 B aligned */
#define QHCA_REG_CMDQ_BASE_HI   0x024
#define QHCA_REG_CMDQ_LOG_SIZE  0x028 /* RW while disabled: log2(entries) */
#define QHCA_REG_CMDQ_PI        0x02c /* WO doorbell: producer index, free-running 32-bit */
#define QHCA_REG_CMDQ_CI        0x030 /* RO: device consumer index, free-running */
#define QHCA_REG_EQ_BASE_LO     0x040 /* RW while disabled: DMA address, 64 B aligned */
#define QHCA_REG_EQ_BASE_HI     0x044
#define QHCA_REG_EQ_LOG_SIZE    0x048 /* RW while disabled: log2(entries) */
#define QHCA_REG_EQ_CI          0x04c /* RW: driver consumer index, free-running */
#define QHCA_REG_EQ_PI          0x050 /* RO: device producer index, free-running */
#define QHCA_REG_INTR_CTRL      0x054 /* RW: QHCA_INTR_* */
#define QHCA_REG_GUEST_ERRORS   0x060 /* RO: bad register/doorbell/queue accesses seen */
#define QHCA_REG_DB_VIOLATIONS  0x064 /* RO: doorbells dropped for naming a foreign queue */
#define QHCA_REG_EQ_OVERFLOWS   0x068 /* RO: events lost because the EQ was full */
#define QHCA_REG_FATAL_SYNDROME 0x06c /* RO: QHCA_FATAL_* once STATUS.FATAL is set */
#define QHCA_REG_NUM_CTX        0x070 /* RO: contexts (allocated UAR pages) alive */
#define QHCA_REG_NUM_PD         0x074 /* RO: protection domains alive */
#define QHCA_REG_NUM_MR         0x078 /* RO: memory regions alive */
#define QHCA_REG_NUM_CQ         0x07c /* RO: completion queues alive */
#define QHCA_REG_NUM_QP         0x080 /* RO: queue pairs alive */
#define QHCA_REG_NUM_MW         0x084 /* RO: memory windows alive */
#define QHCA_REG_NUM_AH         0x088 /* RO: address handles alive */
/*
 * RO: datagrams that reached the port and no QP (addressed to a QPN that is
 * no UD QP in RTR or RTS).  Drops at a QP are counted for its
 * context (struct qhca_ctx_stats).
 */
#define QHCA_REG_UD_NO_QP       0x08c

#define QHCA_MAGIC 0x41434851u /* "QHCA" read as a little-endian u32 */

/* QHCA_REG_CTRL */
#define QHCA_CTRL_ENABLE        (1u << 0) /* 0->1 validates the queue registers and starts */
#define QHCA_CTRL_RESET         (1u << 1) /* write 1: full reset, self-clearing */

/* QHCA_REG_STATUS */
#define QHCA_STATUS_READY       (1u << 0) /* enabled and accepting commands */
#define QHCA_STATUS_FATAL       (1u << 1) /* stopped; only RESET recovers */
#define QHCA_STATUS_CFG_ERROR   (1u << 2) /* last ENABLE rejected the queue registers */

/* QHCA_REG_INTR_CTRL */
#define QHCA_INTR_EQ_ENABLE     (1u << 0) /* raise QHCA_MSIX_VEC_EQ when events are posted */

/* QHCA_REG_FATAL_SYNDROME */
#define QHCA_FATAL_NONE         0
#define QHCA_FATAL_CMDQ_DMA     1 /* reading a command failed */
#define QHCA_FATAL_EQ_DMA       2 /* writing an event failed */

/* Capability bits (QHCA_REG_CAPS_*, struct qhca_device_attr.caps). */
#define QHCA_CAP_UAR_ISOLATION  (1ull << 0) /* doorbells checked against the page's owner */
#define QHCA_CAP_RC             (1ull << 1) /* reliable connected QPs (loopback wire) */
#define QHCA_CAP_ODP            (1ull << 2) /* on-demand-paging regions: see "On-demand paging" */
#define QHCA_CAP_MW             (1ull << 3) /* memory windows, types 1, 2A and 2B: see "Memory windows" */
#define QHCA_CAP_UD             (1ull << 4) /* unreliable datagram QPs: see "Unreliable datagram" */
#define QHCA_CAP_PORT           (1ull << 5) /* a port with a GID table, address vectors on RC QPs: see "The port" */
#define QHCA_CAP_KERNEL         (1ull << 6) /* the driver's own context: physical regions, the GSI QP: see "Kernel verbs" */
#define QHCA_CAP_FAST_REG       (1ull << 7) /* the kernel context's fast-registration regions: see "Fast registration" */
#define QHCA_CAP_ETH            (1ull << 8) /* the port's Ethernet QP: see "The Ethernet function" */
#define QHCA_CAP_SRQ            (1ull << 9) /* shared receive queues: see "Shared receive queues" */
#define QHCA_CAP_CMD_FLAGS      (1ull << 10) /* struct qhca_cmd.flags: QHCA_CMD_FLAG_POLLED, _RESUME */

/* Queue sizing limits. */
#define QHCA_QUEUE_MIN_LOG      1
#define QHCA_QUEUE_MAX_LOG      12

/* ------------------------------------------------------------------------ */
/* Command queue: the driver writes qhca_cmd entries into a ring in guest    */
/* memory and stores the new producer index to QHCA_REG_CMDQ_PI.  Each       */
/* command completes with one QHCA_EQE_CMD_DONE event carrying its token.    */
/* ------------------------------------------------------------------------ */

enum qhca_cmd_opcode {
	QHCA_CMD_NOP          = 0x00,
	QHCA_CMD_QUERY_DEVICE = 0x01, /* out: struct qhca_device_attr at out_addr */
	QHCA_CMD_ALLOC_UAR    = 0x02, /* in[0] = QHCA_UAR_*; out: eqe.data[0] = UAR page index */
	QHCA_CMD_FREE_UAR     = 0x03, /* in[0] = UAR page index */
	/*
	 * Verbs objects.  Every object belongs to the context (UAR page) named
	 * when it is created; destroy and modify name it again and the device
	 * checks it (QHCA_CMD_BAD_RESOURCE otherwise).  Inputs that do not fit
	 * in in[] are read from a mailbox at in[...] as documented per opcode.
	 */
	QHCA_CMD_ALLOC_PD     = 0x04, /* in[0] = uar; out: data[0] = pdn */
	QHCA_CMD_DEALLOC_PD   = 0x05, /* in[0] = uar, in[1] = pdn; BAD_STATE while in use */
	QHCA_CMD_REG_MR       = 0x06, /* in: struct qhca_cmd_reg_mr; out: data[0] = key */
	QHCA_CMD_DEREG_MR     = 0x07, /* in[0] = uar, in[1] = key, in[2] = QHCA_DEREG_MR_* */
	QHCA_CMD_CREATE_CQ    = 0x08, /* in: struct qhca_cmd_create_cq; out: data[0] = cqn */
	QHCA_CMD_DESTROY_CQ   = 0x09, /* in[0] = uar, in[1] = cqn; BAD_STATE while in use */
	QHCA_CMD_CREATE_QP    = 0x0a, /* in: struct qhca_cmd_create_qp; out: data[0] = qpn */
	QHCA_CMD_MODIFY_QP    = 0x0b, /* in[0] = uar, in[1] = qpn, in[2] = mailbox (struct qhca_qp_attr) */
	QHCA_CMD_QUERY_QP     = 0x0c, /* in[0] = uar, in[1] = qpn; out: struct qhca_qp_attr */
	QHCA_CMD_DESTROY_QP   = 0x0d, /* in[0] = uar, in[1] = qpn */
	QHCA_CMD_QUERY_CTX    = 0x0e, /* in[0] = uar; out: struct qhca_ctx_stats */
	/* On-demand paging; see "On-demand paging" below. */
	QHCA_CMD_MAP_ODP      = 0x0f, /* in[0] = uar, in[1] = key, in[2] = first VA page, in[3] = count, in[4] = entries */
	QHCA_CMD_INVALIDATE_ODP = 0x10, /* in[0] = uar, in[1] = key, in[2] = first VA page, in[3] = count */
	QHCA_CMD_RESUME       = 0x11, /* in[0] = uar, in[1] = token, in[2] = QHCA_RESUME_* */
	/* Watched regions; see "The invalidation page" below. */
	QHCA_CMD_REVOKE_PAGES = 0x12, /* in[0] = uar, in[1] = key, in[2] = first page-list entry, in[3] = count */
	/* Memory windows; see "Memory windows" below. */
	QHCA_CMD_ALLOC_MW     = 0x13, /* in[0] = uar, in[1] = pdn, in[2] = QHCA_MW_TYPE_*; out: data[0] = key */
	QHCA_CMD_DEALLOC_MW   = 0x14, /* in[0] = uar, in[1] = key (its tag is not checked) */
	QHCA_CMD_CREATE_AH    = 0x15, /* in: struct qhca_cmd_create_ah; out: data[0] = ah */
	QHCA_CMD_DESTROY_AH   = 0x16, /* in[0] = uar, in[1] = ah */
	/* The port; see "The port" below.  SET_GID is the driver's, not a context's. */
	QHCA_CMD_QUERY_PORT   = 0x17, /* out: struct qhca_port_attr */
	QHCA_CMD_SET_GID      = 0x18, /* in: struct qhca_cmd_set_gid */
	/* Shared receive queues; see "Shared receive queues" below. */
	QHCA_CMD_CREATE_SRQ   = 0x19, /* in: struct qhca_cmd_create_srq; out: data[0] = srqn */
	QHCA_CMD_MODIFY_SRQ   = 0x1a, /* in[0] = uar, in[1] = srqn, in[2] = limit (0: disarmed) */
	QHCA_CMD_QUERY_SRQ    = 0x1b, /* in[0] = uar, in[1] = srqn; out: data[0] = limit, data[1] = WQEs posted, not taken */
	QHCA_CMD_DESTROY_SRQ  = 0x1c, /* in[0] = uar, in[1] = srqn; BAD_STATE while a QP uses it */
	/* in[0] = uar, in[1] = cqn, in[2] = log_entries, in[3] = npages, in[4] = pages_addr; out: data[0] = CQEs moved */
	QHCA_CMD_RESIZE_CQ    = 0x1d,
	/* in[0] = uar, in[1] = key, in[2] = pdn, in[3] = access; see "Memory regions" */
	QHCA_CMD_MODIFY_MR    = 0x1e,
	QHCA_CMD_MAX, /* first unassigned opcode */
};

/*
 * struct qhca_cmd.flags, on a device with QHCA_CAP_CMD_FLAGS (a device
 * without it refuses any flag, so a driver sets none before it has read the
 * capabilities).  POLLED, any command: the driver looks for the completion
 * itself when its CMDQ_PI write returns, so a command that completes inside
 * that write raises no interrupt for its completion.
 * RESUME, MAP_ODP only: once the pages are in, the command resumes the
 * fault whose token is in in_ext (QHCA_RESUME_OK), and data[0] of its
 * completion is that RESUME's status.
 */
#define QHCA_CMD_FLAG_POLLED    (1u << 0)
#define QHCA_CMD_FLAG_RESUME    (1u << 1)

/* 64 bytes; lives in the command ring. */
struct qhca_cmd {
	__u16 opcode;   /* enum qhca_cmd_opcode */
	__u16 flags;    /* QHCA_CMD_FLAG_*; must be 0 otherwise */
	__u32 token;    /* echoed in the completion event */
	__u64 out_addr; /* DMA address of the output buffer, or 0 */
	__u32 out_len;  /* bytes at out_addr the device may write */
	/*
	 * Opcode-specific input beyond in[]: CREATE_QP's SRQ number (0: the
	 * QP has its own receive queue), MAP_ODP's token with
	 * QHCA_CMD_FLAG_RESUME; 0 otherwise.
	 */
	__u32 in_ext;
	__u64 in[5];    /* opcode-specific inline input */
};

/* Command completion status (struct qhca_eqe.status for QHCA_EQE_CMD_DONE). */
enum qhca_cmd_status {
	QHCA_CMD_OK           = 0x00,
	QHCA_CMD_BAD_OPCODE   = 0x01,
	QHCA_CMD_BAD_PARAM    = 0x02, /* a field failed validation (incl. reserved != 0) */
	QHCA_CMD_NO_RESOURCES = 0x03,
	QHCA_CMD_BAD_RESOURCE = 0x04, /* names an object that does not exist */
	QHCA_CMD_BAD_STATE    = 0x05,
	QHCA_CMD_DMA_ERROR    = 0x06, /* out_addr could not be written */
};

/* ------------------------------------------------------------------------ */
/* Event queue: the device writes qhca_eqe entries into a ring in guest      */
/* memory.  The owner bit of entry i on pass p (p = index / entries) is      */
/* (p + 1) & 1: the ring starts zeroed, the first pass writes 1.  The driver */
/* reads an entry only when its owner bit matches, then publishes its        */
/* consumer index in QHCA_REG_EQ_CI; the device never overwrites an entry    */
/* the driver has not consumed (it counts an overflow instead).              */
/* ------------------------------------------------------------------------ */

enum qhca_eqe_type {
	QHCA_EQE_CMD_DONE = 0x01,
	QHCA_EQE_CQ_COMP  = 0x02, /* data[0] = cqn, data[1] = uar: an armed CQ got a CQE */
	QHCA_EQE_QP_ERR   = 0x03, /* data[0] = qpn, data[1] = uar: QP entered ERR on its own */
	QHCA_EQE_CQ_ERR   = 0x04, /* data[0] = cqn, data[1] = uar: CQ overrun or bad ring access */
	QHCA_EQE_PAGE_FAULT = 0x05, /* struct qhca_eqe_page_fault */
	/*
	 * data[0] = port (1), data[1] = enum qhca_port_state: the link of the
	 * port's netdev went up or down (QUERY_PORT says the same from then on).
	 * One per change, in order; none while the device is not READY.
	 */
	QHCA_EQE_PORT_CHANGE = 0x06,
	/* data[0] = srqn, data[1] = uar: fewer WQEs than the armed limit; disarmed */
	QHCA_EQE_SRQ_LIMIT = 0x07,
	/* data[0] = qpn, data[1] = uar: a QP of an SRQ in ERR holds no receive WQE */
	QHCA_EQE_QP_LAST_WQE = 0x08,
};

/* 32 bytes. */
struct qhca_eqe {
	__u8  type;     /* enum qhca_eqe_type */
	__u8  status;   /* enum qhca_cmd_status for CMD_DONE */
	__u16 rsvd0;
	__u32 token;    /* the command's token for CMD_DONE */
	__u64 data[2];  /* event-specific output */
	__u8  rsvd1[7];
	__u8  owner;    /* bit 0: QHCA_EQE_OWNER */
};

#define QHCA_EQE_OWNER 0x01

/* QHCA_CMD_QUERY_DEVICE output; also what the driver reports to user space. */
struct qhca_device_attr {
	__u32 abi_version;
	__u32 num_uars;
	__u64 caps;           /* QHCA_CAP_* */
	__u64 node_guid;
	__u64 fw_version;     /* major << 32 | minor << 16 | patch */
	__u32 vendor_id;
	__u32 vendor_part_id;
	__u32 hw_ver;
	__u32 max_pd;
	__u32 max_cq;
	__u32 max_cqe;
	__u32 max_qp;
	__u32 max_qp_wr;
	__u32 max_sge;
	__u32 max_inline;
	__u32 max_mr;
	__u16 max_qp_rd_atom;      /* responder resources per QP (max_dest_rd_atomic): 16 */
	__u16 max_qp_init_rd_atom; /* initiator depth per QP (max_rd_atomic): 16 */
	__u64 max_mr_size;
	__u64 page_size_cap;
	/* As struct ibv_odp_caps; 0 without QHCA_CAP_ODP. */
	__u64 odp_general_caps;    /* QHCA_ODP_SUPPORT, QHCA_ODP_SUPPORT_IMPLICIT */
	__u32 odp_rc_caps;         /* QHCA_ODP_SUPPORT_SEND ... _ATOMIC for RC QPs */
	__u32 odp_ud_caps;         /* the same for UD QPs: QHCA_ODP_SUPPORT_SEND */
	__u32 max_mw;              /* memory windows; 0 without QHCA_CAP_MW */
	__u32 max_ah;              /* address handles; 0 without QHCA_CAP_UD */
	__u32 max_srq;             /* shared receive queues; 0 without QHCA_CAP_SRQ */
	__u32 max_srq_wr;          /* WQEs per SRQ (max_sge SGEs each) */
};

/* qhca_device_attr.odp_general_caps (the values of IBV_ODP_SUPPORT*). */
#define QHCA_ODP_SUPPORT          (1ull << 0)
#define QHCA_ODP_SUPPORT_IMPLICIT (1ull << 1)
/* qhca_device_attr.odp_rc_caps (the values of IBV_ODP_SUPPORT_SEND ...). */
#define QHCA_ODP_SUPPORT_SEND     (1u << 0)
#define QHCA_ODP_SUPPORT_RECV     (1u << 1)
#define QHCA_ODP_SUPPORT_WRITE    (1u << 2)
#define QHCA_ODP_SUPPORT_READ     (1u << 3)
#define QHCA_ODP_SUPPORT_ATOMIC   (1u << 4)
#define QHCA_ODP_SUPPORT_SRQ_RECV (1u << 5) /* a receive WQE of an SRQ */

/* ------------------------------------------------------------------------ */
/* Verbs objects: protection domains, memory regions, completion queues and  */
/* queue pairs.                                                             */
/*                                                                          */
/* Memory the device reaches on behalf of a context (rings and MRs) is given */
/* to it as a two-level page list.  The command's pages_addr is the DMA     */
/* address of a directory: DIV_ROUND_UP(npages, QHCA_PL_PAGE_ENTRIES)        */
/* little-endian __u64 addresses, 8-byte aligned, each of a 4 KiB-aligned    */
/* page-list page.  A page-list page holds up to QHCA_PL_PAGE_ENTRIES        */
/* little-endian __u64 DMA addresses, one per 4 KiB page of the object, in   */
/* order; the last one holds the remainder.  So no list needs more than      */
/* 16 KiB of contiguous memory.  The device copies the list into its own     */
/* state at create time (a budget of pages per command-queue turn, resuming  */
/* a long list on the next turn); the guest cannot change a translation      */
/* afterwards except by destroying the object.                               */
/* ------------------------------------------------------------------------ */

#define QHCA_PAGE_SHIFT         12
#define QHCA_PAGE_SIZE          (1u << QHCA_PAGE_SHIFT)
#define QHCA_MAX_PAGE_LIST      (1u << 20) /* pages in one page list */
#define QHCA_PL_PAGE_ENTRIES    (QHCA_PAGE_SIZE / 8) /* addresses in a page-list page */
#define QHCA_PL_MAX_DIR         (QHCA_MAX_PAGE_LIST / QHCA_PL_PAGE_ENTRIES)

/* Access rights of a memory region (struct qhca_cmd_reg_mr.access). */
#define QHCA_ACCESS_LOCAL_WRITE   (1u << 0)
#define QHCA_ACCESS_REMOTE_WRITE  (1u << 1) /* requires LOCAL_WRITE */
#define QHCA_ACCESS_REMOTE_READ   (1u << 2)
#define QHCA_ACCESS_REMOTE_ATOMIC (1u << 3) /* requires LOCAL_WRITE */
#define QHCA_ACCESS_ALL           0xfu
/*
 * Not a right: the region is on-demand paged (see "On-demand paging"):
 * REG_MR then has npages = 0 and pages_addr = 0, and every page of the
 * region starts not present.
 */
#define QHCA_ACCESS_ON_DEMAND     (1u << 4)
/*
 * Not a right, and never sent to the device: REG_MR of a pinned region that
 * the driver watches for a registration cache (see "The invalidation page"
 * below).  Not with ON_DEMAND.
 */
#define QHCA_ACCESS_WATCHED       (1u << 5)
/*
 * Memory windows may be bound to the region (IBV_ACCESS_MW_BIND).  Not with
 * ON_DEMAND or WATCHED in this version.
 */
#define QHCA_ACCESS_MW_BIND       (1u << 6)
/*
 * Not a right: a physical region of a kernel context (see "Kernel verbs"):
 * its addresses are DMA addresses, translated by nothing.  REG_MR then has
 * npages = 0 and pages_addr = 0; the region spans iova .. iova + length - 1
 * as any other (iova 0 and length UINT64_MAX: every address).  Not with
 * ON_DEMAND, WATCHED or MW_BIND.
 */
#define QHCA_ACCESS_PHYSICAL      (1u << 7)
/*
 * Not a right: a fast-registration region of a kernel context (see "Fast
 * registration"): REG_MR then has npages = the most pages it may map (1 ..
 * QHCA_FAST_REG_MAX_PAGES), iova, length and pages_addr 0, and no other
 * QHCA_ACCESS_* bit.  The region starts invalid.
 */
#define QHCA_ACCESS_FAST_REG      (1u << 8)

/*
 * A memory region's key is opaque: the device takes it from a sequence of
 * 31-bit values (1..2^31-1, QHCA_MW_KEY_FLAG clear), so a key, once
 * deregistered, names no region until 2^31 - 1 more registrations, and keys
 * never run out.  L_Key and R_Key of a region are the same value.  The low
 * QHCA_KEY_TAG_BITS of a window's key are the consumer's (see "Memory
 * windows").
 *
 * MODIFY_MR changes a registered region's PD (in[2], the same context's)
 * and rights (in[3]: QHCA_ACCESS_ALL bits and QHCA_ACCESS_MW_BIND, the same
 * rules as REG_MR's) in place: key, translation and bounds stay, and the
 * next access through the key sees the change.  BAD_STATE while windows are
 * bound to the region; BAD_PARAM for a kernel region (physical or fast
 * registration) and for MW_BIND on an on-demand one.  (ibv_rereg_mr of the
 * PD or the access alone keeps the keys, as on mlx5 and rxe.)
 */
#define QHCA_KEY_TAG_BITS       8

/* QHCA_CMD_REG_MR input, overlaying qhca_cmd.in[] (40 bytes). */
struct qhca_cmd_reg_mr {
	__u32 uar;
	__u32 pdn;
	__u64 iova;       /* first byte of the region (byte granular) */
	__u64 length;     /* bytes; > 0 */
	__u32 access;     /* QHCA_ACCESS_* */
	__u32 npages;     /* pages in the list: covers iova .. iova + length - 1 */
	__u64 pages_addr; /* DMA address of __le64[npages]; page 0 holds iova */
};

/*
 * Completion queue: 2^log_entries CQEs of 32 bytes, then one 64-byte
 * doorbell record (struct qhca_cq_dbrec) at offset 32 << log_entries, all in
 * the pages of the list.  The device writes a CQE's owner byte last; the
 * owner bit of entry i on pass p is (p + 1) & 1, as for the event queue.
 * The consumer publishes its free-running consumer index in the doorbell
 * record with a plain store; the device reads it before it would overwrite
 * an entry and moves the CQ to error (QHCA_EQE_CQ_ERR) on overrun.
 *
 * RESIZE_CQ moves the CQ to a new ring (a page list as CREATE_CQ's, the old
 * one's pages allowed) in one step, with indices going on: the device reads
 * the consumer index from the old record; the CQEs from it to its producer
 * index (none may be lost: more than the new ring holds is BAD_PARAM) are
 * copied to the slots their indices have in the new ring, with the owner
 * bit of their pass there; every other slot gets the owner bit that is not
 * yet valid for the next index the device will write to it; the new record
 * gets the consumer index.  Then the old ring is no longer touched.  The
 * consumer must not poll or publish during the command, and goes on at its
 * own index in the new ring.  A CQ in error (or whose rings the device
 * cannot reach) is BAD_STATE; an armed CQ stays armed.
 */
#define QHCA_CQE_SIZE           32
#define QHCA_CQ_MIN_LOG         1
#define QHCA_CQ_MAX_LOG         16

struct qhca_cq_dbrec {
	__u32 ci;         /* written by the consumer: free-running consumer index */
	__u32 rsvd[15];
};

/* QHCA_CMD_CREATE_CQ input, overlaying qhca_cmd.in[]. */
struct qhca_cmd_create_cq {
	__u32 uar;
	__u32 log_entries;
	__u32 npages;
	__u32 rsvd0;
	__u64 pages_addr;
	__u64 rsvd1[2];
};

enum qhca_wc_status {
	QHCA_WC_SUCCESS            = 0x00,
	QHCA_WC_LOC_LEN_ERR        = 0x01,
	QHCA_WC_LOC_QP_OP_ERR      = 0x02,
	QHCA_WC_LOC_PROT_ERR       = 0x04,
	QHCA_WC_WR_FLUSH_ERR       = 0x05,
	QHCA_WC_MW_BIND_ERR        = 0x06,
	QHCA_WC_BAD_RESP_ERR       = 0x07,
	QHCA_WC_LOC_ACCESS_ERR     = 0x08,
	QHCA_WC_REM_INV_REQ_ERR    = 0x09,
	QHCA_WC_REM_ACCESS_ERR     = 0x0a,
	QHCA_WC_REM_OP_ERR         = 0x0b,
	QHCA_WC_RETRY_EXC_ERR      = 0x0c,
	QHCA_WC_RNR_RETRY_EXC_ERR  = 0x0d,
	QHCA_WC_GENERAL_ERR        = 0x15,
};

/* struct qhca_cqe.opcode */
enum qhca_wc_opcode {
	QHCA_WC_SEND               = 0x00,
	QHCA_WC_RDMA_WRITE         = 0x01,
	QHCA_WC_RDMA_READ          = 0x02,
	QHCA_WC_COMP_SWAP          = 0x03,
	QHCA_WC_FETCH_ADD          = 0x04,
	QHCA_WC_BIND_MW            = 0x05,
	QHCA_WC_LOCAL_INV          = 0x06,
	QHCA_WC_REG_MR             = 0x0a, /* the kernel's IB_WC_REG_MR (no user verbs opcode) */
	QHCA_WC_RECV               = 0x80,
	QHCA_WC_RECV_RDMA_WITH_IMM = 0x81,
};

#define QHCA_CQE_WITH_IMM       (1u << 0) /* struct qhca_cqe.flags: imm_data is valid */
#define QHCA_CQE_WITH_INV       (1u << 1) /* a SEND_WITH_INV invalidated the key in imm_data */
#define QHCA_CQE_WITH_GRH       (1u << 2) /* UD: a struct qhca_grh starts the receive buffer */
#define QHCA_CQE_CSUM           (1u << 3) /* Ethernet QP receive: imm_data is the frame's sum */

/* 32 bytes. */
struct qhca_cqe {
	__u64 wr_id;
	__u32 byte_len;
	__u32 imm_data;   /* as the sender gave it (network order is the user's business);
			   * with QHCA_CQE_WITH_INV the key it invalidated */
	__u32 qpn;
	__u32 src_qp;     /* receive CQEs: the QPN of the QP that sent the message
			   * (UD: its port is the GRH's sgid) */
	__u8  opcode;     /* enum qhca_wc_opcode */
	__u8  status;     /* enum qhca_wc_status */
	__u8  vendor_err;
	__u8  flags;      /* QHCA_CQE_* */
	/*
	 * The free-running 16-bit index of the WQE this CQE completes: an SQ
	 * index for send-side opcodes (every earlier WQE of that SQ, signalled
	 * or not, is then complete too), an RQ index for receive opcodes.
	 * Flush CQEs carry it as well.
	 */
	__u16 wqe_index;
	__u8  rsvd;
	__u8  owner;      /* bit 0: QHCA_CQE_OWNER */
};

#define QHCA_CQE_OWNER          0x01

/*
 * Queue pair rings, in one page list: the send queue (2^sq_log slots of
 * 2^sq_stride_log bytes) then, page aligned, the receive queue (2^rq_log
 * slots of 2^rq_stride_log bytes).  The device reads a slot only between its
 * own consumer index and the producer index the owner rang; producer indices
 * are free-running 16-bit counters carried in the doorbell word.
 *
 * A send WQE is a 32-byte control segment, a 16-byte remote-address segment,
 * a 16-byte atomic segment, then from offset 64 either num_sge data segments
 * or, with QHCA_WQE_INLINE, inline_len bytes of data.  A BIND_MW WQE has a
 * struct qhca_wqe_bind in place of the remote-address and atomic segments;
 * LOCAL_INV and BIND_MW have no data (num_sge 0, not INLINE).  A send WQE
 * of a UD QP has a struct qhca_wqe_ud in place of the remote-address
 * segment (see "Unreliable datagram").
 */
#define QHCA_SQ_MIN_STRIDE_LOG  7  /* 128 B: 64 B of headers + 4 SGEs */
#define QHCA_SQ_MAX_STRIDE_LOG  11
#define QHCA_RQ_MIN_STRIDE_LOG  5  /* 32 B: 16 B header + 1 SGE */
#define QHCA_RQ_MAX_STRIDE_LOG  9
#define QHCA_WQ_MAX_LOG         15
#define QHCA_WQE_DATA_OFFSET    64

enum qhca_wr_opcode {
	QHCA_WR_RDMA_WRITE          = 0x00,
	QHCA_WR_RDMA_WRITE_WITH_IMM = 0x01,
	QHCA_WR_SEND                = 0x02,
	QHCA_WR_SEND_WITH_IMM       = 0x03,
	QHCA_WR_RDMA_READ           = 0x04,
	QHCA_WR_ATOMIC_CMP_AND_SWP  = 0x05,
	QHCA_WR_ATOMIC_FETCH_AND_ADD = 0x06,
	QHCA_WR_LOCAL_INV           = 0x07, /* imm_data: the key to invalidate */
	QHCA_WR_BIND_MW             = 0x08, /* struct qhca_wqe_bind */
	QHCA_WR_SEND_WITH_INV       = 0x09, /* imm_data: the peer's key to invalidate */
	QHCA_WR_REG_MR              = 0x0a, /* struct qhca_wqe_reg_mr: see "Fast registration" */
};

/* struct qhca_wqe_ctrl.flags */
#define QHCA_WQE_SIGNALED       (1u << 0) /* write a CQE on success */
#define QHCA_WQE_SOLICITED      (1u << 1)
#define QHCA_WQE_INLINE         (1u << 2) /* data is inline at QHCA_WQE_DATA_OFFSET */
#define QHCA_WQE_FENCE          (1u << 3)
#define QHCA_WQE_AV             (1u << 4) /* UD, kernel contexts: the address vector is in the WQE */
#define QHCA_WQE_CSUM           (1u << 5) /* Ethernet QP: checksum offload, imm_data says where */

struct qhca_wqe_ctrl {
	__u64 wr_id;
	__u8  opcode;     /* enum qhca_wr_opcode */
	__u8  flags;      /* QHCA_WQE_* */
	__u8  num_sge;
	__u8  rsvd0;
	__u32 imm_data;
	__u32 inline_len;
	__u32 rsvd1[3];
};

struct qhca_wqe_raddr {
	__u64 remote_addr;
	__u32 rkey;
	__u32 rsvd;
};

struct qhca_wqe_atomic {
	__u64 swap_add;   /* swap value (CMP_AND_SWP) or addend (FETCH_AND_ADD) */
	__u64 compare;
};

/* QHCA_WR_BIND_MW, at offset 32 (see "Memory windows"). */
struct qhca_wqe_bind {
	__u64 addr;       /* the window's first byte, inside the region */
	__u64 length;     /* bytes; 0 unbinds a type 1 window */
	__u32 mw_key;     /* names the window: its key (the tag is not checked) */
	__u32 new_key;    /* the window's key once bound: same index, new tag */
	__u32 mr_key;     /* the region (QHCA_ACCESS_MW_BIND) */
	__u32 access;     /* QHCA_ACCESS_REMOTE_*: the window's rights */
};

/* QHCA_WR_REG_MR, at offset 32 (see "Fast registration"). */
struct qhca_wqe_reg_mr {
	__u64 iova;       /* the region's first byte once registered (byte granular) */
	__u64 length;     /* bytes; > 0 */
	__u64 pages_addr; /* DMA address of __le64[npages], page 0 holding iova */
	__u32 key;        /* the region's key once registered: its own, any tag */
	__u32 access;     /* QHCA_ACCESS_LOCAL_WRITE and QHCA_ACCESS_REMOTE_* */
};

struct qhca_sge {
	__u64 addr;
	__u32 length;
	__u32 lkey;
};

/* A receive WQE: this header, then num_sge data segments. */
struct qhca_rwqe {
	__u64 wr_id;
	__u32 num_sge;
	__u32 rsvd;
};

enum qhca_qp_state {
	QHCA_QPS_RESET = 0,
	QHCA_QPS_INIT  = 1,
	QHCA_QPS_RTR   = 2,
	QHCA_QPS_RTS   = 3,
	QHCA_QPS_ERR   = 6,
};

/*
 * A QPN is generation << QHCA_QPN_INDEX_BITS | index.  The device bumps the
 * generation whenever an index is reused, so a destroyed QP's number names
 * no QP until 2^(24 - QHCA_QPN_INDEX_BITS) later creations of that index,
 * and a doorbell, packet or command naming a stale QPN is refused.
 */
#define QHCA_QPN_INDEX_BITS     10

/* Transport service of a QP (CREATE_QP). */
enum qhca_qp_type {
	QHCA_QPT_RC  = 0, /* reliable connected */
	QHCA_QPT_UD  = 1, /* unreliable datagram */
	QHCA_QPT_GSI = 2, /* the port's QP1: a UD QP of a kernel context; see "Kernel verbs" */
	QHCA_QPT_ETH = 3, /* the port's Ethernet QP, a kernel context's; see "The Ethernet function" */
};

/* QHCA_CMD_CREATE_QP input, overlaying qhca_cmd.in[]. */
struct qhca_cmd_create_qp {
	__u32 uar;
	__u32 pdn;
	__u32 send_cqn;
	__u32 recv_cqn;
	__u8  sq_log;
	__u8  sq_stride_log;
	__u8  rq_log;
	__u8  rq_stride_log;
	__u16 max_inline;
	__u16 max_sge;    /* per send and per receive WQE */
	__u32 npages;
	__u32 type;       /* enum qhca_qp_type */
	__u64 pages_addr;
};

/* struct qhca_qp_attr.mask: which fields MODIFY_QP applies. */
#define QHCA_QP_ATTR_STATE      (1u << 0)
#define QHCA_QP_ATTR_ACCESS     (1u << 1) /* access: QHCA_ACCESS_REMOTE_* allowed as responder */
#define QHCA_QP_ATTR_DEST_QPN   (1u << 2)
#define QHCA_QP_ATTR_RQ_PSN     (1u << 3)
#define QHCA_QP_ATTR_SQ_PSN     (1u << 4)
#define QHCA_QP_ATTR_PATH_MTU   (1u << 5)
#define QHCA_QP_ATTR_TIMEOUT    (1u << 6)
#define QHCA_QP_ATTR_RETRY_CNT  (1u << 7)
#define QHCA_QP_ATTR_RNR_RETRY  (1u << 8)
#define QHCA_QP_ATTR_MIN_RNR_TIMER (1u << 9)
#define QHCA_QP_ATTR_MAX_RD_ATOMIC      (1u << 10) /* RTR->RTS, RTS->RTS; 0..max_qp_init_rd_atom */
#define QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC (1u << 11) /* INIT->RTR, RTR->RTR; 0..max_qp_rd_atom */
#define QHCA_QP_ATTR_QKEY       (1u << 12) /* UD only: RESET->INIT (required), then any */
#define QHCA_QP_ATTR_AV         (1u << 13) /* RC only: INIT->RTR; the peer's address (see "The port") */
#define QHCA_QP_ATTR_ALL        0x3fffu

/*
 * max_rd_atomic (the initiator depth) and max_dest_rd_atomic (the responder
 * resources) are 16, the device maximum, from CREATE_QP on.  MODIFY_QP takes
 * QHCA_QP_ATTR_MAX_RD_ATOMIC only at RTR->RTS and RTS->RTS and
 * QHCA_QP_ATTR_MAX_DEST_RD_ATOMIC only at INIT->RTR and RTR->RTR, each
 * 0..16 (more: QHCA_CMD_BAD_PARAM), 0 meaning none, as the verbs have it:
 * a READ or atomic WQE of a QP whose max_rd_atomic is 0 completes with
 * QHCA_WC_LOC_QP_OP_ERR (the QP to ERR), and one arriving at a QP whose
 * max_dest_rd_atomic is 0 is an invalid request (below).  rdma_cm
 * connections of programs that read nothing ask for 0.  The requester
 * keeps at most max_rd_atomic RDMA READs and atomics in flight; a READ or
 * atomic that
 * arrives while the responder is still answering max_dest_rd_atomic of them
 * is an invalid request: the responder NAKs it and goes to ERR, and the
 * requester completes its oldest outstanding WQE (the READ still being
 * answered) with QHCA_WC_REM_INV_REQ_ERR, flushes the rest and goes to ERR.
 */

/*
 * An address vector: where a UD datagram (CREATE_AH) or an RC QP's packets
 * (QHCA_QP_ATTR_AV) go; the fields of struct ibv_ah_attr and its
 * ibv_global_route that mean something on this fabric.  32 bytes.
 */
struct qhca_ah_attr {
	__u8  dgid[16];      /* the destination port's GID, as on the wire */
	__u32 flow_label;    /* 20 bits */
	__u8  traffic_class;
	__u8  hop_limit;
	__u8  sl;            /* 0..15; carried, not acted on */
	__u8  port_num;      /* the local port: 1 */
	__u8  sgid_index;    /* the source: a valid entry of the port's GID table */
	__u8  rsvd[7];
};

/* MODIFY_QP mailbox and QUERY_QP output; 64 bytes. */
struct qhca_qp_attr {
	__u32 mask;          /* MODIFY_QP: QHCA_QP_ATTR_*; QUERY_QP: all valid */
	__u8  state;         /* enum qhca_qp_state */
	__u8  path_mtu;      /* log2(bytes): 8 (256) .. 12 (4096) */
	__u8  timeout;       /* local ACK timeout: 4.096 us << timeout; 0 = infinite */
	__u8  retry_cnt;     /* 0..7 */
	__u8  rnr_retry;     /* 0..7; 7 = infinite */
	__u8  min_rnr_timer; /* IB encoding, 0..31 */
	__u8  max_rd_atomic;      /* READs/atomics in flight as requester */
	__u8  max_dest_rd_atomic; /* accepted as responder */
	__u32 access;        /* QHCA_ACCESS_REMOTE_* the QP accepts as responder */
	__u32 dest_qpn;
	__u32 rq_psn;        /* 24 bits */
	__u32 sq_psn;        /* 24 bits */
	__u32 qkey;          /* UD: the Q_Key datagrams to this QP must carry */
	struct qhca_ah_attr av; /* RC: where the peer is; until set, this port's GID 0 */
};

/* QHCA_CMD_QUERY_CTX output: what the device counted for one context. */
struct qhca_ctx_stats {
	__u64 db_accepted;   /* doorbells that named a queue of this context */
	__u64 db_violations; /* doorbells rung on this context's page naming another's queue */
	__u64 pkt_foreign;   /* packets for this context's QPs dropped: not from the QP's peer */
	__u64 rnr_retries;   /* RNR NAKs this context's requesters waited out */
	__u64 odp_req_faults;  /* page faults raised by its QPs as requesters */
	__u64 odp_resp_faults; /* page faults raised by its QPs as responders */
	__u64 odp_fault_rnr_naks; /* RNR NAKs its responders sent because of a fault */
	__u64 odp_invalidations;  /* INVALIDATE_ODP commands on its regions */
	/* Datagrams its UD QPs dropped (see "Unreliable datagram"): */
	__u64 ud_drop_qkey;     /* the Q_Key did not match the QP's */
	__u64 ud_drop_no_recv;  /* no receive WQE was posted */
	__u64 ud_drop_too_long; /* GRH + message larger than the receive WQE's buffers */
	__u64 ud_drop_fault;    /* the receive buffer was on demand and not present */
};

/* ------------------------------------------------------------------------ */
/* Memory windows (IBA 10.6.7).                                             */
/*                                                                          */
/* A window is a remote key for a byte range of a region, with its own      */
/* rights, bound and invalidated by the process itself with WQEs on a send  */
/* queue: no command, no system call.  ALLOC_MW creates it unbound in a PD; */
/* its key is QHCA_MW_KEY_FLAG | index << QHCA_KEY_TAG_BITS | tag, where    */
/* index carries a generation above its QHCA_MW_INDEX_BITS-bit slot (as a   */
/* QPN does), so a deallocated window's keys name no window for 2^11        */
/* allocations of that slot.  The tag is the consumer's (ibv_inc_rkey).    */
/*                                                                          */
/* BIND_MW (struct qhca_wqe_bind) runs in SQ order once every earlier WQE   */
/* has completed (one that fails flushes it: it then did nothing), and      */
/* before any later WQE starts; its CQE is QHCA_WC_BIND_MW.  It             */
/* needs: the window in the QP's PD; new_key with the window's index and a  */
/* tag other than its current one; the region in the same PD with           */
/* QHCA_ACCESS_MW_BIND; [addr, addr + length) inside the region; rights     */
/* among QHCA_ACCESS_REMOTE_*, with LOCAL_WRITE on the region for           */
/* REMOTE_WRITE and REMOTE_ATOMIC (IBA 10.6.7.2.2); a type 2 window         */
/* unbound (invalidated).  Anything else completes with                     */
/* QHCA_WC_MW_BIND_ERR, changes nothing, and the QP goes to ERR.  A bind    */
/* takes the window's key to new_key: a key of an earlier bind stops        */
/* working at once.  A type 1 window is usable by any QP of its PD; a bind  */
/* of length 0 unbinds it.  A type 2 window is bound to the QP that bound   */
/* it and usable through that QP only (2A: checked by QPN; 2B: by QPN and   */
/* PD); it is unbound by LOCAL_INV (a QP of its PD; QHCA_WC_LOCAL_INV) or   */
/* by a SEND_WITH_INV that lands on the QP it is bound to (the receive CQE  */
/* has QHCA_CQE_WITH_INV and the key in imm_data).  LOCAL_INV of anything   */
/* but a bound type 2 window of the QP's PD with that exact key completes   */
/* with QHCA_WC_LOC_QP_OP_ERR (as rxe); a SEND_WITH_INV that names one is a */
/* remote invalid request: its receive WQE completes with                   */
/* QHCA_WC_REM_INV_REQ_ERR and the sender's with the same status.  A type 2 */
/* window is invalidated when its QP is destroyed, so that no QP that gets  */
/* that QPN later can use it.                                               */
/*                                                                          */
/* A responder checks a window key on every packet as it checks a region's: */
/* bound, exact key, PD (and QP), the window's rights and the QP's, byte    */
/* bounds of the window.  DEREG_MR of a region with windows bound to it is  */
/* QHCA_CMD_BAD_STATE (EBUSY from the driver), as IBA says, unless it has   */
/* QHCA_DEREG_MR_UNBIND_MWS: then those windows are unbound first (their   */
/* keys stop working) and the region goes.  DEALLOC_MW unbinds.            */
/* ------------------------------------------------------------------------ */

enum qhca_mw_type {
	QHCA_MW_TYPE_1  = 1,
	QHCA_MW_TYPE_2A = 2,
	QHCA_MW_TYPE_2B = 3,
};

#define QHCA_MW_KEY_FLAG        (1u << 31)
/* DEREG_MR (command in[2], qhca_ioc_handle.flags): unbind its windows. */
#define QHCA_DEREG_MR_UNBIND_MWS (1u << 0)
#define QHCA_MW_INDEX_BITS      12

/* ------------------------------------------------------------------------ */
/* Unreliable datagram (IBA 9.8, 10.2.5, 11.4.1.2).                         */
/*                                                                          */
/* A UD QP (CREATE_QP type QHCA_QPT_UD) sends and receives datagrams: one   */
/* packet each, SEND or SEND_WITH_IMM only, at most QHCA_UD_MAX_MSG bytes   */
/* (the port's MTU), no ACK, no retry, no PSN check.  Its states are those */
/* of RC with other attributes: RESET->INIT needs QHCA_QP_ATTR_QKEY, RTR->  */
/* RTS needs QHCA_QP_ATTR_SQ_PSN, and every transition accepts QKEY; no    */
/* other attribute is accepted.  It receives in RTR and RTS, sends in RTS. */
/*                                                                          */
/* Where a datagram goes is an address handle: CREATE_AH in a PD names a    */
/* port by its GID (dgid), the local GID to send from (sgid_index) and the  */
/* GRH fields to send with (see "The port" for GIDs).                       */
/* The AH number is generation << QHCA_AH_INDEX_BITS | slot (as a QPN), so  */
/* a destroyed AH's number names nothing for 2^11 creations of the slot.   */
/* A send WQE names the AH, the remote QPN and a Q_Key (struct              */
/* qhca_wqe_ud); a Q_Key with QHCA_QKEY_CONTROLLED set means the QP's own  */
/* (IBA 10.2.5: only a privileged process may set such a Q_Key on a QP:     */
/* the driver refuses MODIFY_QP with it, EPERM, without CAP_NET_RAW).  The  */
/* WQE completes once its packet has left: an AH that is not the QP's       */
/* context's and PD's (or is gone), an opcode other than SEND/SEND_WITH_IMM */
/* or more than QHCA_UD_MAX_MSG bytes complete with QHCA_WC_LOC_QP_OP_ERR   */
/* (the length: QHCA_WC_LOC_LEN_ERR) and the QP goes to ERR.               */
/*                                                                          */
/* The device stamps every datagram with the sending port and QPN; the      */
/* process cannot choose them.  A receiving QP takes a datagram from any   */
/* source whose Q_Key matches its own, into its oldest receive WQE: a       */
/* struct qhca_grh (QHCA_GRH_SIZE bytes: the sender's port GID, the AH's    */
/* traffic class, flow label and hop limit) at the start of the buffers,    */
/* then the message; byte_len = QHCA_GRH_SIZE + message; the CQE has        */
/* QHCA_CQE_WITH_GRH and src_qp = the sending QPN.  A datagram whose Q_Key  */
/* differs, that finds no receive WQE, that does not fit the WQE's buffers  */
/* (GRH included), or whose buffer is an on-demand page not present, is     */
/* dropped -- nothing written, the WQE stays posted -- and counted in the   */
/* receiving context's struct qhca_ctx_stats.  One for a GID that is not   */
/* the port's does not arrive (see "The port"); one addressed to a QPN that */
/* is no UD QP in RTR/RTS is counted in QHCA_REG_UD_NO_QP.  A receive WQE the device cannot use (a bad L_Key,    */
/* no local write) completes with an error and the QP goes to ERR, as RC.  */
/* Not in this version: multicast, and on-demand receive buffers (they are */
/* never faulted in: odp_ud_caps has QHCA_ODP_SUPPORT_SEND only).           */
/* ------------------------------------------------------------------------ */

#define QHCA_UD_MAX_MSG         4096
#define QHCA_GRH_SIZE           40
#define QHCA_GID_PREFIX         0xfe80000000000000ull
#define QHCA_AH_INDEX_BITS      12
#define QHCA_QKEY_CONTROLLED    (1u << 31)

/* ------------------------------------------------------------------------ */
/* Shared receive queues (IBA 10.2.9).                                      */
/*                                                                          */
/* An SRQ is a receive queue that RC and UD QPs of its context share: a QP  */
/* created with its srqn in qhca_cmd.in_ext (rq_log and rq_stride_log 0,    */
/* its page list the send queue's alone) takes every receive WQE from it.   */
/* The ring is 2^log slots of 2^stride_log bytes (struct qhca_rwqe and at   */
/* most max_sge SGEs, as a QP's receive queue), then one struct             */
/* qhca_srq_dbrec, all in the pages of the list.  The owner posts WQEs and  */
/* rings QHCA_DB_SRQ with the new producer index from its own doorbell      */
/* page, as for a receive queue.                                           */
/*                                                                          */
/* A message that needs a receive WQE (a SEND, an RDMA WRITE with           */
/* immediate, a datagram) takes the oldest one; the device copies it (so    */
/* the slot is free at once), writes its consumer index to the record and   */
/* checks the SGEs against the SRQ's PD.  Taken WQEs complete in the order  */
/* their messages end, on the recv CQ of the QP that took each, with        */
/* wqe_index the WQE's SRQ index: the owner may post into a slot once the   */
/* record's ci has passed it.  An empty SRQ is what an empty receive queue */
/* is: an RNR NAK (RC), a dropped datagram (UD).  A QP in ERR flushes the   */
/* WQE it holds (a message in progress) and then raises                     */
/* QHCA_EQE_QP_LAST_WQE once; WQEs still in the SRQ stay there.  A QP      */
/* reset or destroyed while holding one loses it (the verbs' order is ERR, */
/* LAST_WQE_REACHED, then destroy).  MODIFY_SRQ arms a limit (at most      */
/* 2^log): when taking a WQE leaves fewer than limit posted, the device     */
/* raises QHCA_EQE_SRQ_LIMIT and disarms it.  SRQ numbers are generation << */
/* QHCA_SRQ_INDEX_BITS | slot, never 0, as AH numbers.  A doorbell naming   */
/* the receive queue of a QP that uses an SRQ is refused.                  */
/* ------------------------------------------------------------------------ */

#define QHCA_SRQ_INDEX_BITS     10

/* QHCA_CMD_CREATE_SRQ input, overlaying qhca_cmd.in[] (40 bytes). */
struct qhca_cmd_create_srq {
	__u32 uar;
	__u32 pdn;
	__u8  log;        /* 2^log WQEs: 0 .. QHCA_WQ_MAX_LOG */
	__u8  stride_log; /* QHCA_RQ_MIN_STRIDE_LOG .. QHCA_RQ_MAX_STRIDE_LOG */
	__u16 max_sge;    /* SGEs per WQE; they must fit the stride */
	__u32 npages;     /* the ring and the record */
	__u64 pages_addr;
	__u64 rsvd[2];
};

/* After the SRQ's slots; written by the device. */
struct qhca_srq_dbrec {
	__u32 ci;         /* WQEs taken: free-running, the low 16 bits count */
	__u32 rsvd[15];
};


/* QHCA_CMD_CREATE_AH input, overlaying qhca_cmd.in[] (40 bytes). */
struct qhca_cmd_create_ah {
	__u32 uar;
	__u32 pdn;
	struct qhca_ah_attr attr;
};

/* The UD segment of a send WQE of a UD QP, at offset 32. */
struct qhca_wqe_ud {
	__u32 ah;
	__u32 remote_qpn;
	__u32 remote_qkey;   /* QHCA_QKEY_CONTROLLED set: the QP's own Q_Key */
	__u32 rsvd;
};

/*
 * The global route header at the start of a UD receive buffer: struct
 * ibv_grh, and like it in network byte order (big-endian), unlike the rest
 * of this file: the datagram's IPv6 header as RoCEv2 carries it.  paylen is
 * the IPv6 payload length: the UDP header, then what IBA's PayLen counts
 * (BTH, DETH, ImmDt, the message padded to 4 bytes, ICRC).  Between IPv4
 * GIDs the 40 bytes are 20 zero bytes and the IPv4 header instead.
 */
struct qhca_grh {
	__u32 version_tclass_flow; /* 6 << 28 | traffic_class << 20 | flow_label */
	__u16 paylen;
	__u8  next_hdr;            /* 17: UDP (RoCEv2) */
	__u8  hop_limit;
	__u8  sgid[16];
	__u8  dgid[16];
};

/* ------------------------------------------------------------------------ */
/* Kernel verbs (QHCA_CAP_KERNEL).                                          */
/*                                                                          */
/* The driver serves the kernel's own consumers (the MAD layer, the CM,     */
/* NVMe over RDMA) from a context of its own: ALLOC_UAR with               */
/* QHCA_UAR_KERNEL in in[0] (any other bit: QHCA_CMD_BAD_PARAM).  Its      */
/* objects are a user context's, with rings in pages the driver owns and   */
/* doorbells it rings in its own page, and two things no user context may  */
/* have (QHCA_CMD_BAD_PARAM from any other context):                        */
/*  - physical regions (REG_MR with QHCA_ACCESS_PHYSICAL): a key whose     */
/*    addresses are the DMA addresses the driver mapped, for the kernel's  */
/*    local DMA key (ib_pd.local_dma_lkey) and get_dma_mr;                 */
/*  - the GSI QP (CREATE_QP type QHCA_QPT_GSI): the port's QP1, which      */
/*    carries the MADs of the kernel's CM.  It is a UD QP in every way     */
/*    (states, attributes, Q_Key, receive buffers with a struct qhca_grh)  */
/*    whose number is QHCA_GSI_QPN, which no other QP ever gets (numbers   */
/*    start at 1 << QHCA_QPN_INDEX_BITS); datagrams to QPN 1, from this    */
/*    device or the wire, go to it, and it sends from QPN 1.  One at a time */
/*    per device (a second: QHCA_CMD_NO_RESOURCES).                         */
/*  - address vectors in the WQE: a UD send WQE with QHCA_WQE_AV names no    */
/*    AH (struct qhca_wqe_ud.ah is 0): a struct qhca_ah_attr sits at        */
/*    QHCA_WQE_DATA_OFFSET, checked as CREATE_AH checks one (a bad one:     */
/*    QHCA_WC_LOC_QP_OP_ERR and the QP to ERR, as a bad AH), and the data  */
/*    segments or inline data follow at QHCA_WQE_AV_DATA_OFFSET.  So a      */
/*    kernel AH is the driver's alone, as mlx5's datagram segment carries  */
/*    its address vector: the core creates AHs where it cannot sleep, and  */
/*    a command sleeps.  In a user context the flag is QHCA_WC_LOC_QP_OP_ERR. */
/* Without QHCA_CAP_KERNEL the device has none of this, and the driver      */
/* offers no kernel verbs.                                                  */
/* ------------------------------------------------------------------------ */

#define QHCA_UAR_KERNEL         (1u << 0) /* ALLOC_UAR in[0] */
#define QHCA_WQE_AV_DATA_OFFSET 96        /* QHCA_WQE_AV: QHCA_WQE_DATA_OFFSET + the AV */
#define QHCA_GSI_QPN            1
#define QHCA_GSI_QKEY           0x80010000u /* IBA 13.4.6.1.1: QP1's well-known Q_Key */

/* ------------------------------------------------------------------------ */
/* Fast registration (QHCA_CAP_FAST_REG, with QHCA_CAP_KERNEL).             */
/*                                                                          */
/* What the kernel's storage consumers (NVMe and iSER over RDMA, rdma_rw)   */
/* register memory with, per I/O and without a command: REG_MR with         */
/* QHCA_ACCESS_FAST_REG creates an invalid region of the kernel context     */
/* that can map up to npages pages; its key is index << QHCA_KEY_TAG_BITS   */
/* (a value of the region-key sequence whose low byte is the consumer's     */
/* tag, ib_inc_rkey's, 0 at first), and the whole block of 256 keys is the  */
/* region's while it lives: no other region gets one of them.               */
/*                                                                          */
/* A REG_MR WQE (struct qhca_wqe_reg_mr, RC QPs of the kernel context) runs */
/* in SQ order as BIND_MW does (every earlier WQE complete, no later one    */
/* started).  It needs: key naming a fast-registration region of the QP's  */
/* PD by its index (the tag is the new key's: any value), the region        */
/* invalid; length > 0 and iova + length without overflow; npages =        */
/* pages spanned by [iova, iova + length) at QHCA_PAGE_SIZE, at most the    */
/* region's; rights among LOCAL_WRITE and REMOTE_*, REMOTE_WRITE and         */
/* REMOTE_ATOMIC with LOCAL_WRITE; the list readable and every entry page   */
/* aligned.  The device copies the list then (a later change to it changes  */
/* nothing) and the region is valid with that key, iova, length and        */
/* rights: an L_Key and R_Key as a registered region's, found only by its   */
/* exact key.  Anything else completes with QHCA_WC_LOC_QP_OP_ERR, changes  */
/* nothing, and the QP goes to ERR.  Its CQE is QHCA_WC_REG_MR.             */
/*                                                                          */
/* LOCAL_INV of a region key (QHCA_MW_KEY_FLAG clear) names a fast-         */
/* registration region of the QP's PD by its exact key: it becomes invalid  */
/* (valid or not before: an invalid region stays so); a SEND_WITH_INV that  */
/* lands on a QP of the region's PD does the same (the receive CQE has      */
/* QHCA_CQE_WITH_INV).  Anything else: as for windows (LOCAL_INV            */
/* QHCA_WC_LOC_QP_OP_ERR; SEND_WITH_INV a remote invalid request).  DEREG_MR */
/* names the region by its first key (tag 0), in any state.                 */
/* ------------------------------------------------------------------------ */

#define QHCA_FAST_REG_MAX_PAGES 512

/* ------------------------------------------------------------------------ */
/* The port (QHCA_CAP_PORT).                                                */
/*                                                                          */
/* The device has one port, number 1, with a MAC address and a table of    */
/* QHCA_GID_TABLE_LEN GIDs.  Entry 0 is fixed: QHCA_GID_PREFIX followed by  */
/* the node GUID, both big-endian (fe80::/64 with the GUID as interface     */
/* identifier; the GUID defaults to the MAC's EUI-64, so that GID is the    */
/* port's IPv6 link-local address).  The driver sets entries 1.. with       */
/* QHCA_CMD_SET_GID: IPv4 addresses, as IPv4-mapped GIDs (::ffff:a.b.c.d,   */
/* QHCA_GID_V4_PREFIX), the only kind it takes in this version.             */
/*                                                                          */
/* Every packet carries its source and destination GIDs.  An RC QP sends to */
/* its address vector (QHCA_QP_ATTR_AV at INIT->RTR; until then this port's */
/* GID 0 from GID 0: both ends on this device).  An AV's sgid_index names a */
/* valid entry, and its dgid is IPv4-mapped exactly when that entry is,     */
/* and unicast: not unspecified, loopback, multicast or broadcast (an IPv4  */
/* one also not the broadcast address of an entry's subnet)                 */
/* (QHCA_CMD_BAD_PARAM otherwise); the QP keeps the source GID it had then, */
/* whatever later becomes of the entry.  An RC QP accepts a packet only     */
/* from its peer: the source GID must be the AV's dgid and the destination  */
/* GID the QP's source GID; between two QPs of this device the source QPN   */
/* must be the QP's dest_qpn too (a RoCEv2 frame carries no source QPN).    */
/* A datagram is taken when its destination GID is a valid entry.           */
/*                                                                          */
/* A packet for a GID of this port is delivered inside the device.  Others  */
/* leave on the port's wire: without a netdev there is none, and they are   */
/* dropped (tx_no_route; an RC requester then retries and fails with        */
/* QHCA_WC_RETRY_EXC_ERR); with one they are RoCEv2 frames (see the device  */
/* specification, docs/specs/qhca.rst).  Since loopback traffic never reaches     */
/* the wire, a frame from it that claims to come from this port (its MAC,   */
/* any GID of the table) or from no one host (an unspecified, loopback,     */
/* multicast or broadcast source) is forged: dropped, counted in rx_forged. */
/* ------------------------------------------------------------------------ */

#define QHCA_GID_TABLE_LEN      16
#define QHCA_GID_VALID          (1u << 0) /* struct qhca_gid_entry.flags */

/* ::ffff:0:0/96 as the two big-endian halves of a GID. */
#define QHCA_GID_V4_PREFIX_HI   0ull
#define QHCA_GID_V4_PREFIX_LO   0x0000ffff00000000ull

/* One entry of the GID table; 24 bytes. */
struct qhca_gid_entry {
	__u8  gid[16];
	__u8  flags;         /* QHCA_GID_VALID */
	__u8  prefix_len;    /* the address's subnet prefix (IPv4: 0..32), shown, not routed on */
	__u8  rsvd[6];
};

/*
 * QHCA_CMD_SET_GID input, overlaying qhca_cmd.in[] (40 bytes): entry
 * 1..QHCA_GID_TABLE_LEN - 1 becomes entry (flags QHCA_GID_VALID with an
 * IPv4-mapped gid) or invalid (flags 0, gid and prefix_len 0).
 */
struct qhca_cmd_set_gid {
	__u32 index;
	__u32 rsvd0;
	struct qhca_gid_entry entry;
	__u64 rsvd1;
};

/* struct qhca_port_attr.state */
enum qhca_port_state {
	QHCA_PORT_DOWN   = 1,  /* a netdev whose link is down */
	QHCA_PORT_ACTIVE = 4,
};

/* struct qhca_port_attr.wire */
enum qhca_port_wire {
	QHCA_WIRE_NONE   = 0,  /* no netdev: only this device's own GIDs are reachable */
	QHCA_WIRE_ROCEV2 = 1,  /* a QEMU netdev carrying RoCEv2 frames */
};

/*
 * What the port counted since the device was reset; 160 bytes.  A counter
 * added later takes the first reserved word, so that a device or a driver
 * that predates it reports 0 there (rx_forged: ABI version 2, after
 * test_reordered).
 */
struct qhca_port_counters {
	__u64 tx_frames;         /* RoCEv2 frames sent */
	__u64 tx_bytes;          /* their bytes, Ethernet header to ICRC */
	__u64 rx_frames;         /* RoCEv2 frames accepted */
	__u64 rx_bytes;
	__u64 tx_no_route;       /* packets for a GID the wire cannot reach */
	__u64 tx_no_neigh;       /* packets dropped waiting for a neighbour's MAC */
	__u64 rx_malformed;      /* frames whose headers do not parse or add up */
	__u64 rx_bad_icrc;
	__u64 rx_not_ours;       /* for another MAC or address, or UDP to another port */
	__u64 rx_oversize;       /* payload above the path MTU of 4096 */
	__u64 arp_rx;            /* ARP, and IPv6 neighbour solicitations, received */
	__u64 arp_tx;            /* ARP, and IPv6 neighbour advertisements, sent */
	__u64 test_dropped;      /* frames x-loss-drop lost on purpose (tests) */
	__u64 test_duplicated;
	__u64 test_reordered;
	__u64 rx_forged;         /* frames (ARP too) from the port's own MAC or addresses, or from no one host */
	__u64 eth_tx_frames;     /* frames the Ethernet QP sent (with QHCA_CAP_ETH) */
	__u64 eth_rx_frames;     /* frames delivered to the Ethernet QP */
	__u64 eth_rx_dropped;    /* frames for the Ethernet QP that found no receive WQE, or one too small */
	__u64 rsvd[1];
};

/* QHCA_CMD_QUERY_PORT output. */
struct qhca_port_attr {
	__u8  mac[6];
	__u8  state;         /* enum qhca_port_state */
	__u8  wire;          /* enum qhca_port_wire */
	__u8  max_mtu;       /* log2(bytes): 12 */
	__u8  gid_tbl_len;   /* QHCA_GID_TABLE_LEN */
	__u8  rsvd0[6];
	struct qhca_port_counters counters;
	struct qhca_gid_entry gids[QHCA_GID_TABLE_LEN];
};

/* ------------------------------------------------------------------------ */
/* The Ethernet function (QHCA_CAP_ETH: a port on a netdev, kernel verbs).  */
/*                                                                          */
/* The port is an Ethernet port, as a RoCE NIC's is: a frame that is not    */
/* RoCEv2 for the port goes to the port's Ethernet QP, and what that QP     */
/* sends leaves on the wire as it is.  The Ethernet QP is CREATE_QP type    */
/* QHCA_QPT_ETH in the kernel context (anywhere else: QHCA_CMD_BAD_PARAM),  */
/* one per device (a second: QHCA_CMD_NO_RESOURCES), with an ordinary QPN   */
/* that no packet can name.  Its states are RESET, INIT, RTR, RTS and ERR,  */
/* reached as a UD QP's are, but MODIFY_QP takes no attribute but the state */
/* (any other bit of the mask: QHCA_CMD_BAD_PARAM).                         */
/*                                                                          */
/* Receive (RTR, RTS).  The port takes a frame for the Ethernet QP when its */
/* destination is the port's MAC, broadcast or a multicast group, its       */
/* source is not forged (see "The port": the port's own MAC, a group's, or  */
/* zero), and it is not RoCEv2 for the port (UDP to port 4791 of an address */
/* of the GID table, IPv4 or IPv6: those go to the RDMA engine as before).  */
/* The frame takes the next receive WQE, from its Ethernet header on (no    */
/* FCS), and completes with QHCA_WC_RECV, byte_len the frame's length and   */
/* QHCA_CQE_CSUM: imm_data is the 16-bit ones'-complement sum of the bytes  */
/* after the first QHCA_ETH_HLEN (big-endian 16-bit words, an odd last byte */
/* padded with a zero; folded, not complemented), as Linux's                */
/* CHECKSUM_COMPLETE wants it.  A frame with no receive WQE, or one whose   */
/* buffers are too small, one longer than QHCA_ETH_FRAME_MAX, or one that   */
/* finds 256 frames waiting for the QP already, is dropped                  */
/* (eth_rx_dropped); nothing waits, and RoCEv2 never waits behind them.  A  */
/* receive WQE the device cannot use (a bad key or SGE) completes in error  */
/* and the QP goes to ERR, as a UD QP's.                                    */
/*                                                                          */
/* Addresses.  While the Ethernet QP is in RTR or RTS the guest's stack     */
/* owns the port's addresses: the port answers no ARP request and no        */
/* neighbour solicitation (they reach the QP, as every ARP and ND frame     */
/* does).  It still resolves the MACs of its RoCEv2 peers itself, with ARP  */
/* requests from the GID's address, and learns only from the answers to    */
/* them, which the QP receives too.  Otherwise the port answers for its     */
/* GIDs as "The port" says.                                                 */
/*                                                                          */
/* Send (RTS).  A send WQE is QHCA_WR_SEND with QHCA_WQE_SIGNALED,          */
/* QHCA_WQE_INLINE, QHCA_WQE_FENCE and QHCA_WQE_CSUM allowed; its data,     */
/* gathered or inline, is one frame from its Ethernet header on, without    */
/* FCS, QHCA_ETH_HLEN to QHCA_ETH_FRAME_MAX bytes, whose source MAC is the  */
/* port's.  With QHCA_WQE_CSUM, imm_data is csum_start | csum_offset << 16, */
/* as Linux's CHECKSUM_PARTIAL: the device sums the frame's bytes from      */
/* csum_start (at least QHCA_ETH_HLEN) to its end, as above, and stores the */
/* complement of the sum, big-endian, at csum_start + csum_offset (its two  */
/* bytes within the frame); a complement of 0 is stored as 0xffff, as UDP   */
/* wants it.  Without the flag imm_data is ignored.  The frame goes out on */
/* the wire (never back to the port itself), eth_tx_frames counts it, and a */
/* CQE QHCA_WC_SEND follows if asked for.  Any other WQE, or a frame that   */
/* breaks a rule, completes with QHCA_WC_LOC_LEN_ERR (its length) or        */
/* QHCA_WC_LOC_QP_OP_ERR, nothing sent, and the QP goes to ERR.            */
/* ------------------------------------------------------------------------ */

#define QHCA_ETH_HLEN           14
#define QHCA_ETH_MTU_MAX        9000
#define QHCA_ETH_FRAME_MAX      (QHCA_ETH_MTU_MAX + QHCA_ETH_HLEN + 4) /* with one VLAN tag */

/* ------------------------------------------------------------------------ */
/* On-demand paging (ODP).                                                  */
/*                                                                          */
/* A region registered with QHCA_ACCESS_ON_DEMAND has no page list: the     */
/* device keeps one translation entry per 4 KiB page of the region's        */
/* address range, each not present until the driver maps it.  Pages are     */
/* named by their virtual page number (va >> QHCA_PAGE_SHIFT), so an        */
/* implicit region (iova 0, length QHCA_ODP_IMPLICIT_LENGTH) covers a whole */
/* address space with one key.                                              */
/*                                                                          */
/* An access that finds its page not present, or needs to write and finds   */
/* it not writable, is a page fault.  The device sends one                  */
/* QHCA_EQE_PAGE_FAULT per fault and:                                       */
/*  - requester (gathering a SEND or WRITE, scattering a READ response or   */
/*    an atomic result): the QP stops at the packet it was building or      */
/*    placing; nothing else waits.  A response that could not be placed is  */
/*    dropped and asked for again after RESUME (the responder answers a     */
/*    repeated atomic from its saved result: atomics run exactly once).     */
/*  - responder (an incoming WRITE, READ or atomic, or a SEND into a        */
/*    receive WQE's buffers): the packet is dropped and answered with an    */
/*    RNR NAK carrying the QP's min_rnr_timer; while the fault is           */
/*    outstanding, every retry of that PSN gets the same answer and no new  */
/*    event.  A READ is checked whole before its first response.           */
/* The driver makes the pages present (QHCA_CMD_MAP_ODP) and then sends      */
/* QHCA_CMD_RESUME with the token (or both in one: MAP_ODP with             */
/* QHCA_CMD_FLAG_RESUME): QHCA_RESUME_OK lets the QP retry (it may          */
/* fault again), QHCA_RESUME_ERROR fails the access: a requester completes   */
/* the WQE with QHCA_WC_LOC_PROT_ERR and goes to ERR; a responder NAKs the   */
/* retry with a remote access error.  A token whose QP was reset, destroyed */
/* or has moved on is refused with QHCA_CMD_BAD_RESOURCE (harmless).        */
/*                                                                          */
/* QHCA_CMD_INVALIDATE_ODP marks pages not present; when it completes, no    */
/* device access to the old addresses is in progress or will start.        */
/* ------------------------------------------------------------------------ */

/* struct qhca_cmd_reg_mr.length of an implicit region (iova must be 0). */
#define QHCA_ODP_IMPLICIT_LENGTH (1ull << 57)

/* MAP_ODP entries: __le64 DMA address of the page | these bits. */
#define QHCA_ODP_PRESENT        (1ull << 0)
#define QHCA_ODP_WRITABLE       (1ull << 1) /* requires PRESENT */
#define QHCA_ODP_MAP_MAX        QHCA_PL_PAGE_ENTRIES /* entries per MAP_ODP */

/* QHCA_CMD_RESUME in[2] */
#define QHCA_RESUME_OK          0
#define QHCA_RESUME_ERROR       1

/* struct qhca_eqe_page_fault.flags */
#define QHCA_PF_WRITE           (1u << 0) /* the access writes */
#define QHCA_PF_RESPONDER       (1u << 1) /* raised by a responder (an RNR NAK went out) */

/* QHCA_EQE_PAGE_FAULT, overlaying struct qhca_eqe (32 bytes). */
struct qhca_eqe_page_fault {
	__u8  type;       /* QHCA_EQE_PAGE_FAULT */
	__u8  flags;      /* QHCA_PF_* */
	__u16 rsvd0;
	__u32 token;      /* opaque: QHCA_CMD_RESUME names the fault by it */
	__u64 va;         /* first byte needed that is not mapped as needed */
	__u32 key;        /* the region */
	__u32 qpn;        /* the QP that waits */
	__u32 length;     /* bytes from va the access needs, within the region */
	__u8  rsvd1[3];
	__u8  owner;      /* bit 0: QHCA_EQE_OWNER */
};

/* ------------------------------------------------------------------------ */
/* Doorbells (BAR2).  Page i belongs to the context the driver allocated it  */
/* to with QHCA_CMD_ALLOC_UAR.  A doorbell is one aligned 64-bit store at    */
/* QHCA_DB_OFFSET in the page; the device accepts it only if the page is     */
/* allocated and the queue it names belongs to the page's owner.  Anything   */
/* else is dropped and counted (QHCA_REG_DB_VIOLATIONS / GUEST_ERRORS).      */
/* ------------------------------------------------------------------------ */

#define QHCA_DB_OFFSET          0x000

/* Doorbell word: bits 23..0 queue number, 27..24 type, 63..32 index. */
#define QHCA_DB_QN_MASK         0x00ffffffull
#define QHCA_DB_TYPE_SHIFT      24
#define QHCA_DB_TYPE_MASK       0xfull
#define QHCA_DB_INDEX_SHIFT     32

enum qhca_db_type {
	QHCA_DB_SQ     = 0x1, /* index = new SQ producer index */
	QHCA_DB_RQ     = 0x2, /* index = new RQ producer index */
	QHCA_DB_CQ_ARM = 0x3, /* index = consumer index the arm refers to */
	QHCA_DB_SRQ    = 0x4, /* queue = srqn, index = new SRQ producer index */
};

/* ------------------------------------------------------------------------ */
/* The provider's control path: the request structs of its verbs.           */
/* ------------------------------------------------------------------------ */

/*
 * Every verb of a context goes through the RDMA core's commands on qhca's
 * uverbs node ("The RDMA core's commands on qhca's ib_device" below).  The
 * provider names each verb's arguments and results with one struct
 * qhca_ioc_* below, in the device's numbers, and translates it into the
 * core's command with the driver's udata (struct qhca_ib_*), or into a
 * method of the core's ioctl interface, and the answer back
 * (provider/src/uverbs/).  The driver builds qhca_ioc_reg_mr, _create_cq
 * and _create_qp from the core's request and that udata and hands them to
 * its verbs, which check them and run the device's commands (kmod/ib/,
 * kmod/verbs/).  The structs themselves never cross between user space and
 * the kernel: what they carry does, field by field, and as is only for the
 * structs embedded here that the core's commands carry too
 * (qhca_device_attr, qhca_port_attr, qhca_ctx_stats).
 *
 * size (sizeof the struct) and comp_mask (0) are set by whoever builds a
 * request (the provider's Request::request(), the driver's ioc_size()) and
 * read by no one.  Reserved fields are zero; the driver's REG_MR still
 * refuses a non-zero rsvd (EINVAL).
 *
 * Handles (pdn, cqn, qpn, keys, ah) are the device's numbers; the provider
 * keeps which of the core's handles each one is, and the core accepts only
 * handles of the calling context.  Memory (ring buffers and regions) is the
 * caller's: page-aligned for rings, any alignment for regions; the driver
 * pins it for the object's lifetime.  The ring layout numbers (logs,
 * strides) are the caller's choice within the device limits; the driver and
 * the device both check them.
 */

/*
 * What the device is and what this context owns: the provider fills it from
 * GET_CONTEXT's answer (struct qhca_ib_alloc_ucontext_resp: uar_index and
 * attr) when it opens the context, abi_version with its own
 * QHCA_ABI_VERSION (the driver's is the uverbs device's abi_version,
 * QHCA_IB_UVERBS_ABI_VERSION, checked before).
 */
struct qhca_ioc_query_device {
	__u32 size;        /* sizeof(struct qhca_ioc_query_device) */
	__u32 comp_mask;   /* 0 */
	__u32 abi_version; /* QHCA_ABI_VERSION */
	__u32 uar_index;   /* this context's doorbell page in BAR2 */
	__u64 rsvd_in[2];  /* 0 */
	struct qhca_device_attr attr;
};

/*
 * ALLOC_PD (out: handle), DEALLOC_PD, DEREG_MR, DEALLOC_MW, DESTROY_CQ,
 * DESTROY_QP, DESTROY_AH (in: handle): the core's commands of the same
 * names.  The core's DEREG_MR has no flags: the driver always deregisters
 * with QHCA_DEREG_MR_UNBIND_MWS.
 */
struct qhca_ioc_handle {
	__u32 size;
	__u32 comp_mask;
	__u32 handle;
	__u32 flags;      /* DEREG_MR: QHCA_DEREG_MR_*; the others: 0 */
};

/*
 * REG_MR pins [addr, addr + length) and charges RLIMIT_MEMLOCK, unless
 * access has QHCA_ACCESS_ON_DEMAND: then nothing is pinned or charged and the
 * driver maps pages into the device when it faults on them (and unmaps them
 * when the process's page tables change).  addr 0 with length UINT64_MAX and
 * ON_DEMAND registers the implicit region: one key for the whole address
 * space of the process.  With QHCA_ACCESS_WATCHED (pinned only) the driver
 * revokes the region when its pages change (see "The invalidation page").
 * Sent as the core's REG_MR (iova = addr; ON_DEMAND and MW_BIND as the
 * core's access bits, WATCHED as struct qhca_ib_reg_mr's flag); the core's
 * lkey and rkey are the region's key.
 */
struct qhca_ioc_reg_mr {
	__u32 size;
	__u32 comp_mask;
	__u32 pdn;
	__u32 access;     /* QHCA_ACCESS_*, QHCA_ACCESS_ON_DEMAND or _WATCHED */
	__u64 addr;       /* user virtual address: the region's first byte */
	__u64 length;
	__u32 lkey;       /* out */
	__u32 rkey;       /* out */
	__u64 rsvd;
};

/*
 * CREATE_CQ: sent as the core's CREATE_CQ (cqe 2^log_entries) with struct
 * qhca_ib_create_cq.  eventfd is the completion channel the core signals on
 * each completion event of the armed CQ: an fd of the core's
 * CREATE_COMP_CHANNEL on the same uverbs file, which the provider passes as
 * the core's comp_channel (-1: none).  The driver builds this struct with
 * -1 and ignores the field.
 */
struct qhca_ioc_create_cq {
	__u32 size;
	__u32 comp_mask;
	__u32 log_entries;
	__s32 eventfd;    /* the core's completion channel; -1: none */
	__u64 buf_addr;   /* page aligned: the CQEs, then struct qhca_cq_dbrec */
	__u64 buf_len;
	__u32 cqn;        /* out */
	__u32 rsvd;
};

/*
 * CREATE_QP: sent as the core's CREATE_QP (max_send_wr 2^sq_log, max_recv_wr
 * 2^rq_log, both SGE counts max_sge, max_inline_data max_inline) with struct
 * qhca_ib_create_qp; qpn is the core's QP number.
 */
struct qhca_ioc_create_qp {
	__u32 size;
	__u32 comp_mask;
	__u32 pdn;
	__u32 send_cqn;
	__u32 recv_cqn;
	__u8  sq_log;
	__u8  sq_stride_log;
	__u8  rq_log;
	__u8  rq_stride_log;
	__u16 max_inline;
	__u16 max_sge;
	__u32 type;       /* enum qhca_qp_type */
	__u64 buf_addr;   /* page aligned: the SQ, then the RQ at the next page boundary */
	__u64 buf_len;
	__u32 qpn;        /* out */
	/*
	 * The SRQ it receives from (RC, UD), or 0: then rq_log and
	 * rq_stride_log are 0 and buf_addr holds the SQ alone.
	 */
	__u32 srqn;
};

/*
 * CREATE_SRQ: sent as the core's CREATE_SRQ (max_wr 2^log, max_sge) with
 * struct qhca_ib_create_srq; srqn comes back in struct
 * qhca_ib_create_srq_resp.  The ring ("Shared receive queues") is the
 * caller's memory.  MODIFY_SRQ (IB_SRQ_LIMIT alone: no resizing) and
 * QUERY_SRQ are the core's commands, with no driver data.
 */
struct qhca_ioc_create_srq {
	__u32 size;
	__u32 comp_mask;
	__u32 pdn;
	__u8  log;
	__u8  stride_log;
	__u16 max_sge;
	__u64 buf_addr;   /* page aligned: the slots, then struct qhca_srq_dbrec */
	__u64 buf_len;
	__u32 srqn;       /* out */
	__u32 rsvd;
};

/*
 * MODIFY_QP (attr in) and QUERY_QP (attr out), as the core's commands of the
 * same names.  What the core requires of a transition and the device lets a
 * caller leave out (it keeps its current value), the provider takes from a
 * QUERY_QP first.
 */
struct qhca_ioc_qp_attr {
	__u32 size;
	__u32 comp_mask;
	__u32 qpn;
	__u32 rsvd;
	struct qhca_qp_attr attr;
};

/*
 * ALLOC_MW: a window of type QHCA_MW_TYPE_1 or _2B (the core's types 1 and
 * 2; type 2A cannot be asked for: EOPNOTSUPP) in pdn, unbound; out: its key,
 * the core's rkey (tag included: the key of its first bind is
 * ibv_inc_rkey() of it).  DEALLOC_MW takes a struct qhca_ioc_handle with
 * that key.
 */
struct qhca_ioc_alloc_mw {
	__u32 size;
	__u32 comp_mask;
	__u32 pdn;
	__u32 type;       /* enum qhca_mw_type */
	__u32 key;        /* out */
	__u32 rsvd;
};

/*
 * CREATE_AH: an address handle in pdn, sent as the core's CREATE_AH (a
 * global route from attr, port 1); out: the device's address handle (struct
 * qhca_ib_create_ah_resp).  DESTROY_AH takes a qhca_ioc_handle.
 */
struct qhca_ioc_create_ah {
	__u32 size;
	__u32 comp_mask;
	__u32 pdn;
	__u32 ah;         /* out */
	struct qhca_ah_attr attr;
};

/*
 * QUERY_PORT: the driver's method QHCA_IB_METHOD_QUERY_PORT, whose attribute
 * is attr.  Any context may ask.
 */
struct qhca_ioc_query_port {
	__u32 size;
	__u32 comp_mask;
	__u64 rsvd;
	struct qhca_port_attr attr; /* out */
};

/*
 * QUERY_CTX: the driver's method QHCA_IB_METHOD_QUERY_CTX, whose attribute
 * is stats.
 */
struct qhca_ioc_query_ctx {
	__u32 size;
	__u32 comp_mask;
	__u64 rsvd;
	struct qhca_ctx_stats stats; /* out */
};

/*
 * ADVISE_MR: fault [addr, addr + length) of an on-demand region into the
 * device ahead of use, as ibv_advise_mr() does: the core's ADVISE_MR method
 * (of its MR object), whose advice and flag numbers these are, with one SGE
 * for the range (so length fits 32 bits; EINVAL otherwise).  With
 * QHCA_ADVISE_FLAG_FLUSH the call returns once the pages are mapped (or with
 * the error that stopped it); without, it queues the work and returns.
 * EINVAL for a pinned region or a range outside the region; EFAULT when a
 * page cannot be faulted in.
 */
enum qhca_advise_mr_advice {
	QHCA_ADVISE_PREFETCH       = 0, /* map for reading */
	QHCA_ADVISE_PREFETCH_WRITE = 1, /* map writable */
};

#define QHCA_ADVISE_FLAG_FLUSH  (1u << 0)

struct qhca_ioc_advise_mr {
	__u32 size;
	__u32 comp_mask;
	__u32 lkey;
	__u32 advice;     /* enum qhca_advise_mr_advice */
	__u32 flags;      /* QHCA_ADVISE_FLAG_* */
	__u32 rsvd;
	__u64 addr;
	__u64 length;
};

/*
 * Asynchronous events of a context, as ibv_get_async_event() reports them.
 * The RDMA core queues the driver's events on the context's async event
 * file (GET_CONTEXT's async_fd; poll(2) reports EPOLLIN while one is
 * queued).  The provider reads them and gives each, oldest first, as a
 * struct qhca_ioc_async_event (GET_ASYNC_EVENT; EAGAIN when none): the
 * core's IB_EVENT_CQ_ERR as QHCA_ASYNC_CQ_ERR, IB_EVENT_QP_FATAL,
 * _QP_REQ_ERR and _QP_ACCESS_ERR as QHCA_ASYNC_QP_FATAL,
 * IB_EVENT_DEVICE_FATAL as QHCA_ASYNC_DEVICE_FATAL, with the device's
 * number of the object; any other as 0x100 + the core's type.
 *
 * QHCA_ASYNC_DEVICE_FATAL is queued once when the device is unbound, removed
 * or stops (a command timed out): the context is then disassociated.  Its
 * doorbell page is replaced by a harmless page (stores are dropped, nothing
 * faults), every CQ's completion channel is woken so that waiters wake,
 * every other command fails with EIO (which the provider reports as ENODEV,
 * EIO after a device failure), and poll(2) on the async event file reports
 * EPOLLERR once its events are read.  The program cleans up and exits on its
 * own.
 */
enum qhca_async_event_type {
	QHCA_ASYNC_QP_FATAL     = 0x01, /* element = qpn: the QP entered ERR on its own */
	QHCA_ASYNC_CQ_ERR       = 0x02, /* element = cqn: overrun or bad ring access */
	QHCA_ASYNC_DEVICE_FATAL = 0x03, /* element = 0: the context is disassociated */
};

struct qhca_ioc_async_event {
	__u32 size;
	__u32 comp_mask;
	__u32 type;       /* out: enum qhca_async_event_type */
	__u32 element;    /* out: qpn or cqn; srqn for 0x100 + IB_EVENT_SRQ_LIMIT_REACHED */
	__u64 rsvd[2];
};

/* ------------------------------------------------------------------------ */
/* The invalidation page: watched regions for registration caches.          */
/*                                                                          */
/* REG_MR with QHCA_ACCESS_WATCHED pins the region as usual and also        */
/* watches its pages' virtual range in the process (an MMU interval         */
/* notifier).  When any mapping there changes -- munmap, mremap,            */
/* madvise(MADV_DONTNEED), mprotect, a new mapping at the same address,     */
/* fork (which write-protects private mappings), page migration -- the      */
/* driver revokes the pages that changed before the change goes on, and     */
/* publishes the key here (once).  If that is every page of the region, it */
/* deregisters it in the device (a work request naming the key later       */
/* completes in error), unpins its pages and uncharges RLIMIT_MEMLOCK;      */
/* else it revokes just those pages (QHCA_CMD_REVOKE_PAGES: an access to    */
/* one fails, the rest of the region works on, so requests in flight on     */
/* other buffers a cache entry spans complete), uncharges them at once and  */
/* unpins them.  Either way no access reaches a page the process no longer  */
/* has there.  The key stays the process's handle until DEREG_MR.           */
/* REG_MR fails with EAGAIN if the range changed while it was being         */
/* pinned.  Keys are never reused, so a published key names one             */
/* registration.                                                            */
/*                                                                          */
/* The page is the context's (GET_CONTEXT's inval_mmap_offset, below),     */
/* written only by the driver:                                              */
/*  - generation counts published revocations; revocation g (from 1) is in  */
/*    ring[(g - 1) % QHCA_INVAL_RING_ENTRIES].  The driver writes an entry  */
/*    as: seq = 0, the fields, then seq = g (release), then generation = g  */
/*    (release).                                                            */
/*  - flush_generation is the generation of the last revocation of          */
/*    everything (the device stopped): every watched region is gone.        */
/* A reader remembers the generation it has seen (at first: the one when    */
/* it mapped the page).  When generation (acquire) moved from `seen` to g:  */
/* if flush_generation > seen, or g - seen > QHCA_INVAL_RING_ENTRIES, it    */
/* must assume that every watched region is revoked; else it reads entries  */
/* seen + 1 .. g, each as seq (acquire), the fields, a read barrier, seq    */
/* again: if either seq is not the entry's number, the ring wrapped under   */
/* it (same as above).                                                      */
/* ------------------------------------------------------------------------ */
#define QHCA_INVAL_RING_ENTRIES 127

struct qhca_inval_entry {
	__u64 seq;      /* the revocation's number (its generation), written last */
	__u64 start;    /* the region as registered: addr */
	__u64 length;   /* and length */
	__u32 key;      /* its lkey (= rkey) */
	__u32 rsvd;
};

struct qhca_inval_page {
	__u64 generation;
	__u64 flush_generation;
	__u32 ring_entries; /* QHCA_INVAL_RING_ENTRIES */
	__u32 rsvd0;
	__u64 rsvd1;
	struct qhca_inval_entry ring[QHCA_INVAL_RING_ENTRIES];
};

/* ------------------------------------------------------------------------ */
/* The RDMA core's commands on qhca's ib_device (/dev/infiniband/uverbsN):   */
/* the driver's data (udata) behind the core's structures, as mlx5-abi.h    */
/* and efa-abi.h are for theirs.  Every structure is versioned by the ABI   */
/* version below (the uverbs device's abi_version, which a provider         */
/* matches) and by comp_mask; reserved fields are zero both ways, and       */
/* driver input the kernel does not know must be zero (EINVAL otherwise).   */
/* ------------------------------------------------------------------------ */
#define QHCA_IB_UVERBS_ABI_VERSION 1

/*
 * GET_CONTEXT (alloc_ucontext): no driver input.  The response names the
 * context's own doorbell page (allocated with the context; a context is one
 * of the device's doorbell pages, charged to the user who opened the uverbs
 * file): mmap(db_mmap_offset, QHCA_UAR_PAGE_SIZE, PROT_WRITE, MAP_SHARED)
 * on the uverbs file maps it (uncached; never executable).  It names the
 * context's invalidation page too (struct qhca_inval_page, see "The
 * invalidation page"): mmap(inval_mmap_offset, one page, PROT_READ,
 * MAP_SHARED) maps it; PROT_WRITE is EACCES, a private or executable
 * mapping EINVAL.  attr (CPU byte order) is what the device can do, beyond
 * what the core's QUERY_DEVICE says (max_inline, the QHCA_CAP_* bits); the
 * provider keeps it with uar_index as a struct qhca_ioc_query_device.  A
 * provider built before it passes a shorter response and gets its prefix.
 */
struct qhca_ib_alloc_ucontext_resp {
	__u32 comp_mask;      /* 0 */
	__u32 uar_index;      /* the doorbell page's index in BAR2 */
	__u64 db_mmap_offset; /* of the doorbell page */
	__u64 inval_mmap_offset; /* of the invalidation page: read-only */
	__u64 rsvd;
	struct qhca_device_attr attr;
};

/* ALLOC_PD: no driver input.  The response (4-byte aligned: it follows the
 * core's 4-byte pd_handle) names the device's PD: the pdn of the device's
 * commands and of the provider's requests (ALLOC_PD's handle). */
struct qhca_ib_alloc_pd_resp {
	__u32 pdn;
	__u32 rsvd;
};

/*
 * REG_MR (reg_user_mr): the region's iova must be its address.  Driver
 * input is optional (none: flags 0).  IBV_ACCESS_ON_DEMAND with address 0
 * and length UINT64_MAX is the implicit region.  No driver response: the
 * core's lkey and rkey are the region's key.
 */
#define QHCA_IB_REG_MR_WATCHED (1u << 0) /* pinned and watched (QHCA_ACCESS_WATCHED) */

struct qhca_ib_reg_mr {
	__u32 comp_mask;  /* 0 */
	__u32 flags;      /* QHCA_IB_REG_MR_* */
};

/*
 * CREATE_CQ: the ring is the process's memory, as in qhca_ioc_create_cq:
 * buf_addr page aligned, 2^log_entries CQEs then struct qhca_cq_dbrec,
 * buf_len that rounded up to pages; at least the core's cqe entries.  The
 * core's cqe in the response is 2^log_entries.
 *
 * RESIZE_CQ (resize_user_cq): driver input struct qhca_ib_create_cq naming
 * the new ring (the same rules; at least the core's cqe entries); no driver
 * response, the core's cqe in its response is 2^log_entries.  The CQEs not
 * taken are moved (QHCA_CMD_RESIZE_CQ); the caller must not poll the CQ
 * until the command returns, then polls the new ring from its own consumer
 * index.  EINVAL if the new ring cannot hold the CQEs not taken, EBUSY for a
 * CQ in error, EOPNOTSUPP for a kernel consumer's CQ.  On failure the old
 * ring stays the CQ's.
 */
struct qhca_ib_create_cq {
	__u64 buf_addr;
	__u64 buf_len;
	__u32 log_entries;
	__u32 comp_mask;  /* 0 */
};

struct qhca_ib_create_cq_resp {
	__u32 cqn;        /* what the CQ's doorbells and the CQEs name */
	__u32 rsvd;
};

/*
 * CREATE_QP (RC or UD; no creation flags): the rings, as in
 * qhca_ioc_create_qp.  The core's max_send_wr and max_recv_wr must fit
 * 2^sq_log and 2^rq_log; max_sge is the larger of its two SGE counts;
 * max_inline_data is the QP's inline limit.  The core's response carries the
 * QPN and the capabilities as created (each queue's 2^log entries, max_sge
 * for both).  No driver response.
 */
struct qhca_ib_create_qp {
	__u64 buf_addr;   /* page aligned: the SQ, then the RQ at the next page boundary */
	__u64 buf_len;
	__u8  sq_log;
	__u8  sq_stride_log;
	__u8  rq_log;
	__u8  rq_stride_log;
	__u32 comp_mask;  /* 0 */
};

/*
 * CREATE_SRQ: the ring as in qhca_ioc_create_srq: buf_addr page aligned,
 * 2^log slots of 2^stride_log bytes then struct qhca_srq_dbrec, buf_len that
 * rounded up to pages; the core's max_wr at most 2^log and its max_sge
 * WQE segments fitting a slot.  The core's response has max_wr 2^log and
 * max_sge as asked; srqn is the device's number, which the SRQ's doorbells
 * carry.  A QP created on the SRQ sends qhca_ib_create_qp with rq_log and
 * rq_stride_log 0 and the SQ alone in its buffer.
 */
struct qhca_ib_create_srq {
	__u64 buf_addr;
	__u64 buf_len;
	__u8  log;
	__u8  stride_log;
	__u16 rsvd;
	__u32 comp_mask;  /* 0 */
};

struct qhca_ib_create_srq_resp {
	__u32 srqn;
	__u32 rsvd;
};

/*
 * CREATE_AH: the response names the device's address handle, which a UD
 * send WQE carries (struct qhca_wqe_ud.ah).
 */
struct qhca_ib_create_ah_resp {
	__u32 ah;
	__u32 rsvd;
};

/*
 * Driver methods of the core's ioctl interface (RDMA_VERBS_IOCTL, object
 * UVERBS_OBJECT_DEVICE): what the verbs cannot ask.  Method and attribute
 * ids are in the driver's namespace (1 << UVERBS_ID_NS_SHIFT).
 *
 * QHCA_IB_METHOD_QUERY_CTX: the calling context's counters: attribute
 *   QHCA_IB_ATTR_QUERY_CTX_STATS (out) is a struct qhca_ctx_stats.
 * QHCA_IB_METHOD_QUERY_PORT: the port as the device sees it (MAC, state,
 *   wire, counters, the GID table with prefixes): attribute
 *   QHCA_IB_ATTR_QUERY_PORT_ATTR (out) is a struct qhca_port_attr.
 */
#define QHCA_IB_ID_NS (1u << 12)

enum qhca_ib_device_methods {
	QHCA_IB_METHOD_QUERY_CTX = QHCA_IB_ID_NS,
	QHCA_IB_METHOD_QUERY_PORT,
};

enum qhca_ib_query_ctx_attrs {
	QHCA_IB_ATTR_QUERY_CTX_STATS = QHCA_IB_ID_NS,
};

enum qhca_ib_query_port_attrs {
	QHCA_IB_ATTR_QUERY_PORT_ATTR = QHCA_IB_ID_NS,
};

#endif /* QHCA_ABI_H */
