/*
 * qhca: an emulated RDMA host channel adapter -- device state
 *
 * The register map, queue entries and doorbell format are the ABI in
 * uapi/include/qhca-abi.h; the behaviour is specified in docs/specs/qhca.rst.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#ifndef HW_MISC_QHCA_H
#define HW_MISC_QHCA_H

#include "hw/pci/pci_device.h"
#include "net/net.h"
#include "qemu/log.h"
#include "qemu/queue.h"
#include "qemu/timer.h"
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
QEMU_BUILD_BUG_ON(sizeof(struct qhca_eqe_page_fault) != 32);
QEMU_BUILD_BUG_ON(offsetof(struct qhca_eqe_page_fault, owner) != 31);
QEMU_BUILD_BUG_ON(offsetof(struct qhca_eqe, owner) != 31);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_device_attr) != 128);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_cmd_reg_mr) != 40);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_cmd_create_cq) != 40);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_cmd_create_qp) != 40);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_qp_attr) != 64);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_ctx_stats) != 96);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_ah_attr) != 32);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_gid_entry) != 24);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_cmd_set_gid) != 40);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_port_counters) != 160);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_port_attr) !=
                  16 + 160 + 24 * QHCA_GID_TABLE_LEN);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_cmd_create_ah) != 40);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_wqe_ud) != 16);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_grh) != QHCA_GRH_SIZE);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_cqe) != QHCA_CQE_SIZE);
QEMU_BUILD_BUG_ON(offsetof(struct qhca_cqe, owner) != 31);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_cq_dbrec) != 64);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_wqe_ctrl) != 32);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_wqe_raddr) != 16);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_wqe_atomic) != 16);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_wqe_bind) != 32);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_sge) != 16);
QEMU_BUILD_BUG_ON(sizeof(struct qhca_rwqe) != 16);

#define TYPE_QHCA "qhca"
OBJECT_DECLARE_SIMPLE_TYPE(QhcaState, QHCA)

/* Property defaults and limits. */
#define QHCA_DEFAULT_NUM_UARS   64
#define QHCA_MAX_NUM_UARS       1024

/*
 * Work the command queue does per bottom-half run before yielding to the
 * main loop, in page-list entries read: a command costs QHCA_CMD_COST on its
 * own (so 64 plain commands a run), and every page-list entry (and directory
 * entry) it reads costs one more.  A page list longer than what is left is
 * read on the following runs; the queue stays on that command meanwhile.
 */
#define QHCA_CMD_BUDGET         4096
#define QHCA_CMD_COST           64
/*
 * What the CMDQ_PI write itself runs, in the vCPU thread that wrote it,
 * before the bottom half takes the rest: one command with no page list to
 * read, so that a driver that polls for its completion finds it there when
 * the write returns, with no hop to the main loop.
 */
#define QHCA_CMD_INLINE_BUDGET  QHCA_CMD_COST
/* Not an ABI status: the command waits for its page list (qhca-obj.c). */
#define QHCA_CMD_PENDING        0xff

/*
 * What QUERY_DEVICE reports besides the properties.  The object commands
 * enforce the limits (QHCA_CMD_NO_RESOURCES / QHCA_CMD_BAD_PARAM).
 */
#define QHCA_FW_VERSION         ((0ull << 32) | (1ull << 16) | 0) /* 0.1.0 */
#define QHCA_HW_VER             1
#define QHCA_CAPS               (QHCA_CAP_UAR_ISOLATION | QHCA_CAP_RC | \
                                 QHCA_CAP_ODP | QHCA_CAP_MW | QHCA_CAP_UD | \
                                 QHCA_CAP_PORT | QHCA_CAP_KERNEL | \
                                 QHCA_CAP_FAST_REG | QHCA_CAP_SRQ | \
                                 QHCA_CAP_CMD_FLAGS)
#define QHCA_ODP_GENERAL_CAPS   (QHCA_ODP_SUPPORT | QHCA_ODP_SUPPORT_IMPLICIT)
#define QHCA_ODP_RC_CAPS        (QHCA_ODP_SUPPORT_SEND | \
                                 QHCA_ODP_SUPPORT_RECV | \
                                 QHCA_ODP_SUPPORT_WRITE | \
                                 QHCA_ODP_SUPPORT_READ | \
                                 QHCA_ODP_SUPPORT_ATOMIC | \
                                 QHCA_ODP_SUPPORT_SRQ_RECV)
/* UD: a send gathers from on-demand regions; receive buffers must be pinned. */
#define QHCA_ODP_UD_CAPS        QHCA_ODP_SUPPORT_SEND
#define QHCA_LIMIT_MAX_PD       1024
#define QHCA_LIMIT_MAX_CQ       1024
#define QHCA_LIMIT_MAX_CQE      65536   /* 2^QHCA_CQ_MAX_LOG */
#define QHCA_LIMIT_MAX_QP       1024
#define QHCA_LIMIT_MAX_QP_WR    32768   /* 2^QHCA_WQ_MAX_LOG */
#define QHCA_LIMIT_MAX_SGE      16
#define QHCA_LIMIT_MAX_INLINE   256
#define QHCA_LIMIT_MAX_MR       4096    /* the max-mr property's maximum */
#define QHCA_MR_HASH_SIZE       (2 * QHCA_LIMIT_MAX_MR)
#define QHCA_LIMIT_MAX_MW       (1u << QHCA_MW_INDEX_BITS)
#define QHCA_LIMIT_MAX_AH       (1u << QHCA_AH_INDEX_BITS)
#define QHCA_LIMIT_MAX_SRQ      (1u << QHCA_SRQ_INDEX_BITS)
#define QHCA_LIMIT_MAX_MR_SIZE  (1ull << 32)
#define QHCA_LIMIT_PAGE_SIZES   4096ull
/*
 * Page-list entries the device holds for all objects together: the page
 * lists live in host memory, so a guest must not be able to make QEMU
 * allocate without bound (32 MiB of translations, 16 GiB of guest memory).
 */
#define QHCA_LIMIT_TOTAL_PAGES  (1u << 22)
/*
 * On-demand regions keep their translations in chunks of
 * QHCA_ODP_CHUNK_PAGES entries, allocated when MAP_ODP first makes a page
 * of the chunk present and freed when the last one goes: at most this many
 * for the device (64 MiB of host memory; 32 GiB of guest memory mapped at
 * once, at worst one page per chunk 8 GiB).
 */
#define QHCA_ODP_CHUNK_SHIFT    9
#define QHCA_ODP_CHUNK_PAGES    (1u << QHCA_ODP_CHUNK_SHIFT)
#define QHCA_LIMIT_ODP_CHUNKS   (1u << 14)
/* A fault the event queue had no room for is raised again after this. */
#define QHCA_ODP_EQ_RETRY_NS    100000ll            /* 100 us */

/*
 * RNR back-off of a QP that retries for ever (rnr_retry 7): the n-th RNR NAK
 * in a row for one WQE waits max(the NAK's timer, FLOOR) << (n - 1), at most
 * MAX, so that a QP facing an empty receive queue costs ~20 retries a second
 * rather than the 100,000 the 10 us minimum timer would allow.
 */
#define QHCA_RNR_FLOOR_NS       10000ll             /* 10 us */
#define QHCA_RNR_MAX_NS         100000000ll         /* 100 ms */

/*
 * The most RDMA READs and atomics a requester keeps in flight (IB
 * max_rd_atomic, QUERY_DEVICE's max_qp_init_rd_atom) and a responder
 * accepts (max_dest_rd_atomic, max_qp_rd_atom).  A QP starts with both at
 * this maximum; MODIFY_QP lowers them.  The responder remembers this many
 * answered ones for duplicates whatever its max_dest_rd_atomic.
 */
#define QHCA_LIMIT_MAX_RD_ATOMIC 16

/* Free packets the engine keeps for reuse (QhcaState.pkt_cache). */
#define QHCA_PKT_CACHE 8
/*
 * Messages one QP keeps in flight: its SQ depth, at most this many (each
 * costs a copy of its WQE, ~600 bytes of host memory).
 */
#define QHCA_REQ_WINDOW_MAX     32

/* Engine: WQEs (or packets of one WQE) one QP may use per bottom-half run. */
#define QHCA_QP_BUDGET          16
/* Engine: QP turns per bottom-half run before yielding to the main loop. */
#define QHCA_ENGINE_BUDGET      64
/* Engine: packets the wire may deliver per bottom-half run. */
#define QHCA_WIRE_BUDGET        1024
/* QP turns run inline by a doorbell (see qhca_engine_kick). */
#define QHCA_INLINE_TURNS       1

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
 * whose queues it may ring.  Every object records the context it belongs to.
 */
typedef struct QhcaContext {
    bool in_use;
    bool kernel;                /* QHCA_UAR_KERNEL: the driver's own */
    uint64_t db_accepted;
    uint64_t db_violations;
    uint64_t pkt_foreign;       /* packets for its QPs not from their peer */
    uint64_t rnr_retries;       /* RNR NAKs its requesters waited out */
    uint64_t odp_req_faults;    /* page faults raised by its requesters */
    uint64_t odp_resp_faults;   /* ... and by its responders */
    uint64_t odp_fault_rnr_naks; /* RNR NAKs its responders sent for faults */
    uint64_t odp_invalidations; /* INVALIDATE_ODP commands on its regions */
    uint64_t ud_drop_qkey;      /* datagrams its UD QPs dropped: Q_Key */
    uint64_t ud_drop_no_recv;   /* ... no receive WQE */
    uint64_t ud_drop_too_long;  /* ... did not fit the receive WQE */
    uint64_t ud_drop_fault;     /* ... on-demand receive page not present */
} QhcaContext;

/*
 * A two-level page list being read for the command at the head of the
 * command queue (qhca-obj.c): a budget of entries per bottom-half run.
 * pages is owned here until the command's object takes it.
 */
typedef struct QhcaPageList {
    uint64_t dir;               /* DMA address of the directory */
    uint64_t cur;               /* the page-list page being read */
    uint32_t npages;
    uint32_t done;              /* entries read so far */
    uint64_t *pages;            /* host order; NULL: no list requested */
} QhcaPageList;

/*
 * Verbs objects.  All of their state lives here, in device memory: the
 * guest hands over page lists at create time and never gets to change a
 * translation, a bound or an owner afterwards.  Handles are table indices,
 * but for MR keys (a sequence, looked up by hash: qhca-obj.c), QPNs, window
 * keys and AH numbers (generation above the index).
 */
typedef struct QhcaPd {
    bool in_use;
    uint32_t uar;
    uint32_t nr_mr;             /* MRs, windows and QPs that name this PD */
    uint32_t nr_mw;
    uint32_t nr_qp;
    uint32_t nr_ah;
    uint32_t nr_srq;
} QhcaPd;

/* QHCA_ODP_CHUNK_PAGES translations of an on-demand region (qhca-odp.c). */
typedef struct QhcaOdpChunk {
    uint64_t index;             /* first virtual page >> QHCA_ODP_CHUNK_SHIFT */
    uint32_t present;           /* entries with QHCA_ODP_PRESENT */
    uint64_t e[QHCA_ODP_CHUNK_PAGES]; /* DMA address | QHCA_ODP_* */
} QhcaOdpChunk;

/*
 * A pinned region's page-list entry after REVOKE_PAGES: never reached (any
 * access to the page fails).  No page address is all ones.
 */
#define QHCA_PL_REVOKED UINT64_MAX

typedef struct QhcaMr {
    bool in_use;
    /*
     * On demand: no page list; odp maps chunk index -> QhcaOdpChunk, and a
     * page not in it is not present.
     */
    bool odp;
    GHashTable *odp_chunks;
    bool phys;                  /* no page list: a va is its DMA address */
    /*
     * Fast registration: pages holds npages entries, of which a REG_MR WQE
     * maps the first; usable (found by its exact key) only while valid.
     * Named in s->mr_hash by its first key (tag 0).
     */
    bool fast;
    bool valid;
    /*
     * The key while in use (L_Key and R_Key), from the device's key sequence
     * (qhca_mr_key_next()); found through s->mr_hash.
     */
    uint32_t key;
    uint32_t uar;
    uint32_t pdn;
    uint32_t access;            /* QHCA_ACCESS_* */
    uint64_t iova;
    uint64_t length;
    uint32_t npages;
    uint64_t *pages;            /* page-aligned DMA addresses */
    uint32_t nr_mw;             /* windows bound to it: DEREG_MR waits */
} QhcaMr;

/*
 * A memory window (qhca-mw.c).  index is generation << QHCA_MW_INDEX_BITS |
 * slot, kept when the window is freed so that the next one in the slot
 * gets the next generation.  While bound, mr names a live region (whose
 * nr_mw counts the window) and [addr, addr + length) lies inside it.
 */
typedef struct QhcaMw {
    bool in_use;
    bool bound;
    uint8_t type;               /* QHCA_MW_TYPE_* */
    uint8_t tag;                /* the key's low byte: new with every bind */
    uint32_t index;
    uint32_t uar;
    uint32_t pdn;
    uint32_t qpn;               /* type 2: the QP it is bound to */
    uint32_t access;            /* QHCA_ACCESS_REMOTE_* */
    QhcaMr *mr;
    uint64_t addr;
    uint64_t length;
} QhcaMw;

/*
 * An address vector, checked (qhca-port.c): the destination GID, the source
 * GID as the table had it when the vector was made, and the GRH fields.
 */
typedef struct QhcaAv {
    uint8_t dgid[16];
    uint8_t sgid[16];
    uint8_t sgid_index;
    uint8_t traffic_class;
    uint8_t hop_limit;
    uint8_t sl;
    uint32_t flow_label;
} QhcaAv;

/*
 * An address handle (qhca-ud.c): where a UD QP's datagrams go.  index is
 * generation << QHCA_AH_INDEX_BITS | slot, as a window's.
 */
typedef struct QhcaAh {
    bool in_use;
    uint32_t index;
    uint32_t uar;
    uint32_t pdn;
    QhcaAv av;
} QhcaAh;

typedef struct QhcaCq {
    bool in_use;
    bool error;                 /* overrun or ring DMA failure: no more CQEs */
    bool armed;
    bool arm_pending;           /* armed by a doorbell: check in the BH */
    uint32_t arm_ci;
    uint32_t uar;
    uint32_t log;
    uint32_t pi;                /* device producer index, free-running */
    uint32_t ci;                /* consumer index last read from the dbrec */
    uint32_t nr_qp;             /* QPs that complete into this CQ */
    uint32_t npages;
    uint64_t *pages;
} QhcaCq;

/* One work queue of a QP, inside the QP's page list. */
typedef struct QhcaWq {
    uint32_t log;
    uint32_t stride_log;
    uint64_t offset;            /* of slot 0 in the QP's buffer */
    uint16_t pi;                /* producer index the owner rang */
    uint16_t ci;                /* device consumer index */
} QhcaWq;

/*
 * A shared receive queue (qhca-srq.c).  index is generation <<
 * QHCA_SRQ_INDEX_BITS | slot, as an AH's, with a generation never 0; wq
 * is its ring at offset 0 of its pages, whose ci counts the WQEs taken.
 */
typedef struct QhcaSrq {
    bool in_use;
    uint32_t index;
    uint32_t uar;
    uint32_t pdn;
    uint16_t max_sge;
    uint32_t limit;             /* armed while non-zero */
    uint32_t nr_qp;             /* QPs that receive from it */
    QhcaWq wq;
    uint32_t npages;
    uint64_t *pages;
} QhcaSrq;

/*
 * The receive WQE a QP took last (qhca-srq.c), as the device keeps it: a
 * copy, so that an SRQ's slot is free once taken.
 */
typedef struct QhcaRecv {
    uint64_t wr_id;
    uint16_t index;             /* its RQ or SRQ index: the CQE's wqe_index */
    uint32_t pdn;               /* the PD its SGEs are checked against */
    uint32_t num_sge;
    struct qhca_sge sge[QHCA_LIMIT_MAX_SGE];
} QhcaRecv;


/* A send WQE as the requester keeps it while working on it (host order). */
typedef struct QhcaSendWqe {
    uint64_t wr_id;
    uint8_t opcode;
    uint8_t flags;
    uint8_t num_sge;
    uint32_t imm;
    uint32_t inline_len;
    uint64_t raddr;
    uint32_t rkey;
    uint64_t swap_add;
    uint64_t compare;
    uint64_t length;            /* message length */
    struct qhca_sge sge[QHCA_LIMIT_MAX_SGE];
    uint8_t inline_data[QHCA_LIMIT_MAX_INLINE];
} QhcaSendWqe;

/*
 * A message in flight (qhca-rc-req.c): SQ index idx lives in
 * req_slots[idx & (req_window - 1)] from its start until its completion.
 */
typedef struct QhcaReqSlot {
    QhcaSendWqe wqe;
    uint32_t first_psn;
    uint32_t npkts;             /* PSNs it uses (READ: response packets) */
    uint32_t resp_next;         /* READ: next response packet expected */
    uint8_t status;             /* a local error: completes so, in order */
    bool done;                  /* READ/atomic: its answer is in */
} QhcaReqSlot;

/*
 * A responder resource (IB: max_dest_rd_atomic): an RDMA READ or atomic
 * accepted, kept after it is answered so that a duplicate request is
 * answered again (READ: from memory; atomic: the saved result).
 */
typedef struct QhcaRdRes {
    bool valid;
    bool atomic;
    uint32_t psn;               /* first PSN */
    uint32_t n;                 /* response packets (PSNs) */
    uint32_t next;              /* next response packet to send; n: all sent */
    bool answered;              /* every response sent once: a replay now */
    uint32_t rkey;
    uint32_t len;
    uint64_t va;
    uint64_t orig;              /* atomic: the value before it */
    uint32_t msn;               /* the responder's MSN once it was taken */
} QhcaRdRes;

typedef struct QhcaQp QhcaQp;

struct QhcaQp {
    QhcaState *s;
    bool in_use;
    /*
     * generation << QHCA_QPN_INDEX_BITS | index, or QHCA_GSI_QPN; slot_qpn
     * is the index's last generation, kept when the QP is freed (and while
     * the GSI QP holds the index) so that the next QP there gets the next.
     */
    uint32_t qpn;
    uint32_t slot_qpn;
    uint32_t uar;
    uint32_t pdn;
    uint32_t scqn;
    uint32_t rcqn;
    uint8_t type;               /* QHCA_QPT_* */
    uint16_t max_inline;
    uint16_t max_sge;
    QhcaWq sq;
    QhcaWq rq;                  /* empty (log 0) with an SRQ */
    QhcaSrq *srq;               /* where its receive WQEs come from, or NULL */
    uint32_t npages;
    uint64_t *pages;
    /*
     * The receive WQE taken last.  With an SRQ, recv_held while the QP holds
     * it (taken, not completed); last_wqe once QHCA_EQE_QP_LAST_WQE went.
     */
    QhcaRecv recv;
    bool recv_held;
    bool last_wqe;

    /* qhca_qp_attr, host order */
    uint8_t state;
    uint8_t path_mtu;
    uint8_t timeout;
    uint8_t retry_cnt;
    uint8_t rnr_retry;
    uint8_t min_rnr_timer;
    uint8_t max_rd_atomic;      /* requester: READs and atomics in flight */
    uint8_t max_dest_rd_atomic; /* responder: READs and atomics unanswered */
    uint32_t access;
    uint32_t dest_qpn;
    QhcaAv av;                  /* RC: where the peer is */
    uint32_t rq_psn;            /* responder: next expected PSN */
    uint32_t resp_msn;          /* responder: messages done (AETH MSN) */
    uint32_t sq_psn;            /* requester: next PSN to send */
    uint32_t qkey;              /* UD */

    /*
     * Requester: a window of messages in flight.  SQ indices [sq.ci,
     * req_head) are started (their PSNs assigned); packets go out from
     * packet req_next of req_send (go-back-N moves it back); every PSN up to
     * req_acked_psn is acknowledged; answers are taken only for PSNs before
     * req_sent_psn (assigned is not sent).
     */
    QhcaReqSlot *req_slots;
    uint32_t req_window;        /* power of two, <= SQ entries */
    uint16_t req_head;
    uint16_t req_send;
    uint32_t req_next;
    uint32_t req_acked_psn;
    uint32_t req_sent_psn;      /* one past the furthest PSN sent */
    uint32_t req_rd_atomic;     /* READs and atomics in flight */
    bool req_wait;              /* paused until the RNR backoff timer fires */
    bool req_timer_fired;       /* the timer ran: the BH acts on it */
    bool req_nak_retry;         /* a PSN NAK's resend, no progress since */
    uint8_t req_retry_left;
    uint8_t req_rnr_left;
    uint8_t req_rnr_naks;       /* RNR NAKs in a row for this WQE */
    /*
     * Slow restart after an ACK timeout (qhca-rc-ack.c): the messages from
     * sq.ci that may have packets out, req_window while nothing timed out;
     * one after a timeout, growing by one per message acknowledged up to
     * req_ssthresh and then by one per req_cwnd of them.
     */
    uint32_t req_cwnd;
    uint32_t req_ssthresh;
    uint32_t req_cwnd_acked;    /* messages acknowledged towards the next */
    QEMUTimer *timer;           /* RNR backoff and local ACK timeout */

    /* Responder: the message being received. */
    uint8_t resp_op;            /* QHCA_RESP_*: the message in progress */
    uint64_t resp_off;          /* bytes of the message placed */
    uint64_t resp_va;           /* RDMA WRITE: next byte */
    uint32_t resp_rkey;
    uint64_t resp_left;         /* RDMA WRITE: bytes of the RETH still due */
    uint64_t resp_total;        /* RDMA WRITE: the RETH's length */
    bool resp_have_rwqe;
    bool resp_nak_sent;         /* a PSN-sequence NAK is out: no more */
    /*
     * Responder resources, oldest first from rd_tail: READ responses and
     * atomic ACKs go out in PSN order, a budget of packets a turn.
     */
    bool rd_active;             /* some resource has responses to send */
    uint32_t rd_tail;           /* free-running: the next one to take */
    QhcaRdRes rd_res[QHCA_LIMIT_MAX_RD_ATOMIC];

    /*
     * Page faults (qhca-odp.c).  Requester: stopped at the packet of SQ
     * index req_fault_idx it was building (or, req_fault_answer, the READ
     * response or atomic result it was placing) until RESUME.  Responder:
     * resp_fault while an event is out for the request at resp_fault_psn
     * (its retries are RNR NAKed); resp_fault_read while READ responses
     * wait for a page; resp_fault_failed once RESUME said the page cannot
     * be had (the retry is NAKed with a remote access error).
     */
    bool req_fault;
    bool req_fault_failed;
    bool req_fault_answer;
    uint16_t req_fault_idx;
    uint32_t req_fault_token;
    bool resp_fault;
    bool resp_fault_read;
    bool resp_fault_failed;
    bool resp_fault_ack;        /* served: tell the requester (an ACK) */
    uint32_t resp_fault_token;
    uint32_t resp_fault_psn;

    bool queued;                /* on the engine's run list */
    QTAILQ_ENTRY(QhcaQp) next;
};

typedef struct QhcaWire QhcaWire;
typedef struct QhcaRoce QhcaRoce;
typedef struct QhcaEth QhcaEth;

struct QhcaState {
    PCIDevice parent_obj;

    MemoryRegion regs;          /* BAR0 */
    MemoryRegion uar;           /* BAR2; BAR1 is the MSI-X exclusive BAR */
    QEMUBH *cmd_bh;             /* runs the command queue */

    /* Properties */
    uint32_t num_uars;
    uint32_t max_mr;
    uint64_t node_guid;
    uint32_t max_queue_log;
    bool wire_queued;           /* x-wire-queued: see qhca-wire.c */
    uint64_t wire_drop;         /* x-wire-drop: see qhca-wire.c (tests) */
    NICConf conf;               /* mac, netdev */
    uint32_t loss_drop;         /* x-loss-*: see qhca-roce.c (tests) */
    uint32_t loss_dup;
    uint32_t loss_reorder;
    uint64_t loss_seed;

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

    /* Verbs objects and what they hold */
    QhcaPd *pd;
    QhcaMr *mr;
    QhcaMw *mw;
    QhcaAh *ah;
    QhcaSrq *srq;
    QhcaCq *cq;
    QhcaQp *qp;
    QhcaQp *gsi_qp;             /* the GSI QP (QHCA_GSI_QPN), or NULL */
    QhcaQp *eth_qp;             /* the Ethernet QP (QHCA_QPT_ETH), or NULL */
    uint32_t num_ctx;
    uint32_t num_pd;
    uint32_t num_mr;
    uint32_t num_cq;
    uint32_t num_qp;
    uint32_t num_mw;
    uint32_t num_ah;
    uint32_t num_srq;
    uint32_t ud_no_qp;          /* QHCA_REG_UD_NO_QP */
    uint64_t total_pages;
    uint32_t odp_chunks;        /* QhcaOdpChunks of every on-demand region */
    uint32_t fault_seq;         /* makes page-fault tokens unique */
    /* The fault the last memory access hit (qhca_mr_rw() said FAULT). */
    struct {
        uint32_t key;
        uint64_t va;
        uint64_t len;
        bool write;
    } fault;
    /*
     * MR keys: the last one handed out, and the open-addressed table that
     * finds a live region by key (slot + 1, 0 empty; at most half full).
     */
    uint32_t mr_key_seq;
    uint16_t mr_hash[QHCA_MR_HASH_SIZE];
    uint32_t mr_next;           /* round-robin: where the searches start */
    uint32_t qp_next;
    uint32_t mw_next;
    uint32_t ah_next;
    uint32_t srq_next;

    /* Set while verbs objects exist (qhca_migration_update()). */
    Error *migration_blocker;

    /* The command at the head of the queue while its page list is read. */
    bool cmd_active;
    struct qhca_cmd cmd_cur;    /* host order */
    QhcaPageList pl;

    /*
     * Engine-busy: the command queue and the engine hold object pointers
     * across DMA and interrupts, and a DMA or an MSI-X message aimed at
     * another device's registers can come back into this device (a bus
     * reset from a bridge's control register; a nested aio_poll running our
     * bottom halves).  While busy, a reset and the bottom halves are only
     * noted, and run when the outermost busy section ends; interrupts are
     * raised there too.  See qhca_busy_enter().
     */
    uint32_t busy;
    bool reset_pending;
    bool cmd_deferred;
    bool engine_deferred;
    bool irq_pending;

    /* RC engine (qhca-rc.c) and the wire it talks over (qhca-wire.c) */
    QEMUBH *engine_bh;
    /*
     * Inside qhca_engine_run(): QPs that get work are only queued, and the
     * run's end schedules the bottom half if any are left, so that a
     * doorbell whose message completes in its own turn wakes nobody.
     */
    bool engine_running;
    QhcaQp *turn_qp;          /* the QP whose turn is running, or NULL */
    QTAILQ_HEAD(, QhcaQp) run_list;
    uint32_t cq_arm_pending;    /* CQs with arm_pending set */
    QhcaWire *wire;
    /*
     * Packets built and freed again by the engine (qhca_pkt_new/free): a
     * few kept for the next, so that a message costs no malloc of 4 KiB.
     */
    struct QhcaPkt *pkt_cache[QHCA_PKT_CACHE];
    unsigned pkt_cached;

    /* The port (qhca-port.c) and its RoCEv2 wire (qhca-roce.c), if any */
    struct qhca_gid_entry gid[QHCA_GID_TABLE_LEN];
    struct qhca_port_counters port; /* host order */
    NICState *nic;
    QhcaRoce *roce;
    QhcaEth *eth;               /* the Ethernet function (qhca-eth.c), if any */
};

/*
 * The capability bits (CAPS registers, QUERY_DEVICE): the Ethernet function
 * comes with a netdev.
 */
static inline uint64_t qhca_caps(const QhcaState *s)
{
    return QHCA_CAPS | (s->nic ? QHCA_CAP_ETH : 0);
}

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

/*
 * A step of the path from a doorbell to its CQE (docs/specs/qhca.rst, "Tracing
 * one message"): its trace event gets the host's monotonic clock in ns as
 * its first argument, read only while the event is enabled, so that a
 * disabled step costs the test of its enable flag alone.  EV is the event's
 * name in capitals, ev as declared in trace-events.
 */
#define QHCA_TRACE_STEP(EV, ev, ...)                                    \
    do {                                                                \
        if (trace_event_get_state_backends(TRACE_##EV)) {               \
            trace_##ev(get_clock(), __VA_ARGS__);                       \
        }                                                               \
    } while (0)

static inline bool qhca_ready(const QhcaState *s)
{
    return (s->status & QHCA_STATUS_READY) && !s->reset_pending;
}

/* The remote rights: what a QP accepts as responder, what a window may have. */
#define QHCA_ACCESS_REMOTE      (QHCA_ACCESS_REMOTE_READ | \
                                 QHCA_ACCESS_REMOTE_WRITE | \
                                 QHCA_ACCESS_REMOTE_ATOMIC)

/* The consumer's part of a window key (ibv_inc_rkey). */
#define QHCA_KEY_TAG_MASK       ((1u << QHCA_KEY_TAG_BITS) - 1)
#define QHCA_QPN_GEN_MASK       ((1u << (24 - QHCA_QPN_INDEX_BITS)) - 1)

/* qhca-pci.c */
void qhca_reset(QhcaState *s);
void qhca_migration_update(QhcaState *s);
void qhca_busy_enter(QhcaState *s);
void qhca_busy_exit(QhcaState *s);
MemTxResult qhca_dma_read(QhcaState *s, dma_addr_t addr, void *buf,
                          dma_addr_t len);
MemTxResult qhca_dma_write(QhcaState *s, dma_addr_t addr, const void *buf,
                           dma_addr_t len);

/* qhca-regs.c: BAR0 */
extern const MemoryRegionOps qhca_regs_ops;

/* qhca-cmd.c: command and event queues */
bool qhca_queues_start(QhcaState *s);
void qhca_queues_stop(QhcaState *s);
void qhca_cmd_abandon(QhcaState *s);
void qhca_cmdq_write_pi(QhcaState *s, uint32_t pi);
void qhca_eq_write_ci(QhcaState *s, uint32_t ci);
void qhca_eq_notify(QhcaState *s);
void qhca_cmd_bh(void *opaque);
bool qhca_queues_valid(const QhcaState *s);

/* qhca-db.c: BAR2 and the contexts that own its pages */
extern const MemoryRegionOps qhca_uar_ops;
int qhca_ctx_alloc(QhcaState *s, bool kernel);
bool qhca_ctx_free(QhcaState *s, uint64_t index);
void qhca_ctx_reset(QhcaState *s);

/* qhca-cmd.c */
void qhca_eq_event(QhcaState *s, uint8_t type, uint64_t data0, uint64_t data1);
bool qhca_eq_event_entry(QhcaState *s, struct qhca_eqe *eqe);

/* qhca-obj.c: verbs objects and their commands */
void qhca_obj_init(QhcaState *s);
void qhca_obj_fini(QhcaState *s);
void qhca_obj_reset(QhcaState *s);
void qhca_obj_free_ctx(QhcaState *s, uint32_t uar);
uint8_t qhca_cmd_obj(QhcaState *s, const struct qhca_cmd *cmd,
                     uint64_t *data, QhcaPageList *pl);
uint8_t qhca_pl_load(QhcaState *s, QhcaPageList *pl, int64_t *budget);
void qhca_pl_release(QhcaState *s, QhcaPageList *pl);
QhcaQp *qhca_qp_lookup(QhcaState *s, uint32_t qpn);
bool qhca_objects_exist(const QhcaState *s);
/* qhca-cq.c: completion queues, their commands and CQEs */
uint8_t qhca_cmd_cq(QhcaState *s, const struct qhca_cmd *cmd, uint64_t *data,
                    QhcaPageList *pl);
void qhca_cq_free_ctx(QhcaState *s, uint32_t uar);
QhcaCq *qhca_cq_lookup(QhcaState *s, uint32_t cqn);
/* qhca-mr.c: memory regions and their commands */
uint8_t qhca_cmd_mr_reg(QhcaState *s, const struct qhca_cmd *cmd,
                        uint64_t *data, QhcaPageList *pl);
void qhca_mr_free_ctx(QhcaState *s, uint32_t uar);
QhcaMr *qhca_mr_lookup(QhcaState *s, uint32_t key);
QhcaMr *qhca_cmd_mr(QhcaState *s, uint64_t uar, uint64_t key);
/* qhca-obj.c, for qhca-qp.c and qhca-mr.c */
bool qhca_uar_valid(QhcaState *s, uint64_t uar);
bool qhca_uar_kernel(QhcaState *s, uint64_t uar);
QhcaPd *qhca_pd_lookup(QhcaState *s, uint64_t pdn);
uint8_t qhca_pl_request(QhcaState *s, QhcaPageList *pl, uint64_t dir,
                        uint32_t npages);
uint64_t *qhca_pl_take(QhcaPageList *pl);
void qhca_page_list_free(QhcaState *s, uint64_t **pages, uint32_t *npages);
void qhca_cmd_in_bytes(const struct qhca_cmd *cmd, void *dst, size_t len);
uint8_t qhca_cmd_out(QhcaState *s, const struct qhca_cmd *cmd,
                     const void *src, size_t len);

/* qhca-qp.c: queue pairs */
uint8_t qhca_cmd_create_qp(QhcaState *s, const struct qhca_cmd *cmd,
                           uint64_t *data, QhcaPageList *pl);
uint8_t qhca_cmd_modify_qp(QhcaState *s, const struct qhca_cmd *cmd);
uint8_t qhca_cmd_query_qp(QhcaState *s, const struct qhca_cmd *cmd);
uint8_t qhca_cmd_destroy_qp(QhcaState *s, const struct qhca_cmd *cmd);
void qhca_qp_free(QhcaState *s, QhcaQp *qp);

/* qhca-mw.c: memory windows */
uint8_t qhca_cmd_mw(QhcaState *s, const struct qhca_cmd *cmd, uint64_t *data);
void qhca_mw_free_ctx(QhcaState *s, uint32_t uar);
void qhca_mw_unbind_mr(QhcaState *s, QhcaMr *mr);
void qhca_mw_unbind_qp(QhcaState *s, uint32_t qpn);

/* qhca-srq.c: shared receive queues, and where receive WQEs come from */
uint8_t qhca_cmd_srq(QhcaState *s, const struct qhca_cmd *cmd, uint64_t *data,
                     QhcaPageList *pl);
void qhca_srq_free_ctx(QhcaState *s, uint32_t uar);
QhcaSrq *qhca_srq_lookup(QhcaState *s, uint64_t srqn);

/* qhca-ud.c: address handles */
uint8_t qhca_cmd_ah(QhcaState *s, const struct qhca_cmd *cmd, uint64_t *data);
void qhca_ah_free_ctx(QhcaState *s, uint32_t uar);

/* qhca-port.c: the port, its GID table and address vectors */
void qhca_port_init(QhcaState *s);
void qhca_port_reset(QhcaState *s);
uint8_t qhca_cmd_port(QhcaState *s, const struct qhca_cmd *cmd);
bool qhca_gid_ours(const QhcaState *s, const uint8_t *gid);
bool qhca_gid_is_v4(const uint8_t *gid);
void qhca_gid_from_ipv4(uint8_t *gid, uint32_t ip);
bool qhca_ipv4_ours(const QhcaState *s, uint32_t ip);
bool qhca_gid_eui64_mac(const uint8_t *gid, uint8_t *mac);
bool qhca_gid_unicast(const QhcaState *s, const uint8_t *gid);
bool qhca_gid_forged(const QhcaState *s, const uint8_t *gid);
bool qhca_ipv4_forged(const QhcaState *s, uint32_t ip);
uint8_t qhca_av_load(const QhcaState *s, const struct qhca_ah_attr *in,
                     QhcaAv *av);
void qhca_av_store(const QhcaAv *av, struct qhca_ah_attr *out);
void qhca_av_default(const QhcaState *s, QhcaAv *av);
bool qhca_port_post_load(QhcaState *s);

/* qhca-net.c: the port on a QEMU netdev */
bool qhca_roce_realize(QhcaState *s, Error **errp);
void qhca_roce_unrealize(QhcaState *s);

/* qhca-eth.c: the Ethernet function of a port on a netdev */
void qhca_eth_realize(QhcaState *s);
void qhca_eth_unrealize(QhcaState *s);
void qhca_eth_reset(QhcaState *s);
bool qhca_eth_active(const QhcaState *s);
bool qhca_eth_is_roce(const QhcaState *s, const uint8_t *buf, size_t size);
void qhca_eth_rx(QhcaState *s, const uint8_t *buf, size_t size);
bool qhca_eth_poll(QhcaState *s, unsigned *budget);
bool qhca_eth_pending(const QhcaState *s);

/* qhca-odp.c: on-demand paging */
uint8_t qhca_cmd_odp(QhcaState *s, const struct qhca_cmd *cmd,
                     uint64_t *data);
void qhca_odp_mr_init(QhcaMr *mr);
void qhca_odp_mr_free(QhcaState *s, QhcaMr *mr);

static inline uint32_t qhca_qpn(const QhcaState *s, const QhcaQp *qp)
{
    return qp->qpn;
}

static inline uint32_t qhca_cqn(const QhcaState *s, const QhcaCq *cq)
{
    return cq - s->cq;
}

/* qhca-rc.c: the RC engine */
void qhca_engine_init(QhcaState *s);
void qhca_engine_fini(QhcaState *s);
void qhca_engine_bh(void *opaque);
void qhca_engine_kick(QhcaState *s);

/* qhca-cmd.c: flags, rsvd0, out_* (unless used) and in[nr_in..] are zero. */
bool qhca_cmd_unused_zero(const struct qhca_cmd *cmd, bool uses_out,
                          unsigned nr_in);
void qhca_engine_schedule(QhcaState *s, QhcaQp *qp);
void qhca_engine_enqueue(QhcaState *s, QhcaQp *qp);
void qhca_engine_qp_reset(QhcaState *s, QhcaQp *qp);
void qhca_engine_qp_destroy(QhcaState *s, QhcaQp *qp);
void qhca_qp_set_error(QhcaState *s, QhcaQp *qp, bool event);
void qhca_cq_arm_check(QhcaState *s, QhcaCq *cq);

#endif /* HW_MISC_QHCA_H */
