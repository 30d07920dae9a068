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
 * The spec that goes with it is qemu-device/docs/qhca.rst.
 */
#ifndef QHCA_ABI_H
#define QHCA_ABI_H

#ifdef __KERNEL__
#include <linux/types.h>
#elif defined(QHCA_ABI_NO_LINUX_TYPES)
#include <stdint.h>
typedef uint8_t __u8;
typedef uint16_t __u16;
typedef uint32_t __u32;
typedef uint64_t __u64;
#else
#include <linux/types.h>
#endif

/* Bumped on any incompatible change to anything in this file. */
#define QHCA_ABI_VERSION 1

/* ------------------------------------------------------------------------ */
/* PCI identity                                                             */
/* ------------------------------------------------------------------------ */

/*
 * 0x1234 is QEMU's own vendor ID for emulated devices that have no real
 * hardware counterpart (bochs-display uses 0x1111, edu 0x11e8).  0x4843 is
 * "HC".  Class: network controller, other (0x0280), as InfiniBand HCAs are.
 */
#define QHCA_PCI_VENDOR_ID 0x1234
#define QHCA_PCI_DEVICE_ID 0x4843
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
	QHCA_CMD_ALLOC_UAR    = 0x02, /* out: eqe.data[0] = UAR page index */
	QHCA_CMD_FREE_UAR     = 0x03, /* in[0] = UAR page index */
	QHCA_CMD_MAX, /* first unassigned opcode */
};

/* 64 bytes; lives in the command ring. */
struct qhca_cmd {
	__u16 opcode;   /* enum qhca_cmd_opcode */
	__u16 flags;    /* must be 0 */
	__u32 token;    /* echoed in the completion event */
	__u64 out_addr; /* DMA address of the output buffer, or 0 */
	__u32 out_len;  /* bytes at out_addr the device may write */
	__u32 rsvd0;    /* must be 0 */
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
	__u32 rsvd0;
	__u64 max_mr_size;
	__u64 page_size_cap;
	__u64 rsvd1[4];
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
};

/* ------------------------------------------------------------------------ */
/* Character device /dev/qhcaN: ioctls and mmap.                            */
/* ------------------------------------------------------------------------ */

/*
 * Every ioctl argument starts with `size` (sizeof the struct as the caller
 * knows it) and `comp_mask` (must be 0 in this version).  The driver rejects a
 * size it does not know and non-zero reserved fields with EINVAL, and an
 * unknown command with ENOTTY.
 *
 * The numbers are _IOWR(QHCA_IOC_MAGIC, nr, struct) spelled out so that
 * bindgen sees them; uapi's tests recompute them from the struct sizes.
 */
#define QHCA_IOC_MAGIC 0xCA

#define QHCA_IOC_NR_QUERY_DEVICE 0x00

/* QHCA_IOCTL_QUERY_DEVICE: what the device is and what this context owns. */
struct qhca_ioc_query_device {
	__u32 size;        /* in: sizeof(struct qhca_ioc_query_device) */
	__u32 comp_mask;   /* in: must be 0 */
	__u32 abi_version; /* out: QHCA_ABI_VERSION of the driver */
	__u32 uar_index;   /* out: this context's doorbell page in BAR2 */
	__u64 rsvd_in[2];  /* in: must be 0 */
	struct qhca_device_attr attr; /* out */
};

/* _IOWR(0xCA, 0x00, struct qhca_ioc_query_device): size 0xa0 */
#define QHCA_IOCTL_QUERY_DEVICE 0xc0a0ca00u

/*
 * mmap offsets (bytes; must be page aligned).  The only mapping in this
 * version is the context's own doorbell page: offset QHCA_MMAP_UAR, length
 * QHCA_UAR_PAGE_SIZE, shared, not executable.  Anything else is EINVAL.
 */
#define QHCA_MMAP_UAR 0x0ull

#endif /* QHCA_ABI_H */
