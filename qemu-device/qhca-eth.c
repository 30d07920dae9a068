/*
 * qhca: an emulated RDMA host channel adapter -- the Ethernet function
 *
 * With a netdev the port is an Ethernet port, as a RoCE NIC's is
 * (QHCA_CAP_ETH; the ABI header's "The Ethernet function" is the contract):
 * the kernel context's Ethernet QP (CREATE_QP type QHCA_QPT_ETH, one per
 * device, s->eth_qp) sends whole frames and receives every frame for the
 * port that is not RoCEv2 for one of its GIDs.
 *
 * Send: a QP turn in RTS takes SEND WQEs in order, each one frame gathered
 * (from the QP's PD: the kernel's physical regions) or inline into a buffer
 * of QHCA_ETH_FRAME_MAX bytes, checked (length, the port's source MAC),
 * given its checksum if asked (CHECKSUM_PARTIAL: csum_start and
 * csum_offset in imm_data), and put on the netdev as it is: no x-loss-*, no
 * loopback to the port itself.
 *
 * Receive: qhca-net.c classifies what the netdev hands the port; a frame
 * for the Ethernet QP is queued here (in arrival order, 256 at most, never
 * holding the netdev back: RoCEv2 frames must not wait behind them) and the
 * engine's bottom half delivers it into the QP's next receive WQE, with the
 * CHECKSUM_COMPLETE sum of everything after the Ethernet header in its CQE.
 * A frame that finds no WQE, or one too small, is dropped and counted;
 * nothing waits.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/bswap.h"
#include "qemu/main-loop.h"
#include "net/checksum.h"
#include "net/eth.h"
#include "qhca-rc.h"
#include "trace.h"

/* Frames waiting for the Ethernet QP; beyond this they are dropped. */
#define QHCA_ETH_RX_MAX 256

/* The wire header sizes are the ABI's. */
QEMU_BUILD_BUG_ON(QHCA_ETH_HLEN != QHCA_ETH_SIZE);

typedef struct QhcaEthFrame {
    size_t len;
    uint8_t data[];
} QhcaEthFrame;

struct QhcaEth {
    GQueue rx;                  /* of QhcaEthFrame, oldest first */
    uint8_t frame[QHCA_ETH_FRAME_MAX];  /* the frame being sent */
};

/* ------------------------------------------------------------------------ */
/* checksums                                                                */

/*
 * The 16-bit ones'-complement sum of len bytes at buf (big-endian words, an
 * odd last byte padded with zero), folded, not complemented.
 */
static uint16_t qhca_eth_sum(const uint8_t *buf, size_t len)
{
    uint32_t sum = net_checksum_add(len, (uint8_t *)buf);

    while (sum >> 16) {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    return sum;
}

/*
 * CHECKSUM_PARTIAL: the complement of the sum of bytes [start, len), 0xffff
 * for 0, stored big-endian at start + offset (both checked by the caller).
 */
static void qhca_eth_csum_fill(uint8_t *f, size_t len, uint32_t start,
                               uint32_t offset)
{
    uint32_t sum = net_checksum_add(len - start, f + start);

    stw_be_p(f + start + offset, net_checksum_finish_nozero(sum));
}

/* ------------------------------------------------------------------------ */
/* the function                                                             */

void qhca_eth_realize(QhcaState *s)
{
    s->eth = g_new0(QhcaEth, 1);
    g_queue_init(&s->eth->rx);
}

void qhca_eth_unrealize(QhcaState *s)
{
    qhca_eth_reset(s);
    g_free(s->eth);
    s->eth = NULL;
}

/* Device reset: the frames waiting for the QP are dropped, not delivered. */
void qhca_eth_reset(QhcaState *s)
{
    if (s->eth) {
        g_queue_clear_full(&s->eth->rx, g_free);
    }
}

/* The Ethernet QP exists and receives: the guest's stack owns the port. */
bool qhca_eth_active(const QhcaState *s)
{
    return s->eth_qp && (s->eth_qp->state == QHCA_QPS_RTR ||
                         s->eth_qp->state == QHCA_QPS_RTS);
}

/*
 * The frame (its Ethernet header there) is RoCEv2 for the port: UDP to port
 * 4791 of one of its GIDs, over IPv4 (any header length; not a later
 * fragment, which has no UDP header) or IPv6 (UDP the next header).  Only
 * the headers that say so are looked at: whether the rest is right is the
 * RoCEv2 decoder's business (qhca-roce.c), which counts what it drops.
 */
bool qhca_eth_is_roce(const QhcaState *s, const uint8_t *buf, size_t size)
{
    const uint8_t *ip = buf + QHCA_ETH_HLEN;
    size_t iplen;

    if (size < QHCA_ETH_HLEN) {
        return false;
    }
    switch (lduw_be_p(buf + 12)) {
    case QHCA_ETH_P_IPV4:
        if (size < QHCA_ETH_HLEN + QHCA_IPV4_SIZE || (ip[0] >> 4) != 4 ||
            (ip[0] & 0xf) < 5 || ip[9] != QHCA_IPPROTO_UDP ||
            (lduw_be_p(ip + 6) & 0x1fff) ||
            !qhca_ipv4_ours(s, ldl_be_p(ip + 16))) {
            return false;
        }
        iplen = (ip[0] & 0xf) * 4;
        break;
    case QHCA_ETH_P_IPV6:
        if (size < QHCA_ETH_HLEN + QHCA_IPV6_SIZE || (ip[0] >> 4) != 6 ||
            ip[6] != QHCA_IPPROTO_UDP || !qhca_gid_ours(s, ip + 24) ||
            qhca_gid_is_v4(ip + 24)) {
            return false;
        }
        iplen = QHCA_IPV6_SIZE;
        break;
    default:
        return false;
    }
    return size >= QHCA_ETH_HLEN + iplen + QHCA_UDP_SIZE &&
           lduw_be_p(ip + iplen + 2) == QHCA_ROCE_UDP_PORT;
}

static void qhca_eth_drop(QhcaState *s, size_t len, const char *why)
{
    s->port.eth_rx_dropped++;
    trace_qhca_eth_rx_drop(len, why);
}

/* A frame for the Ethernet QP (the receive callback's, under the BQL). */
void qhca_eth_rx(QhcaState *s, const uint8_t *buf, size_t size)
{
    QhcaEth *e = s->eth;
    QhcaEthFrame *f;

    if (size > QHCA_ETH_FRAME_MAX) {
        qhca_eth_drop(s, size, "longer than QHCA_ETH_FRAME_MAX");
        return;
    }
    if (g_queue_get_length(&e->rx) >= QHCA_ETH_RX_MAX) {
        qhca_eth_drop(s, size, "the receive queue is full");
        return;
    }
    f = g_malloc(sizeof(*f) + size);
    f->len = size;
    memcpy(f->data, buf, size);
    g_queue_push_tail(&e->rx, f);
    qemu_bh_schedule(s->engine_bh);
}

/* ------------------------------------------------------------------------ */
/* receive                                                                  */

/* One frame into the Ethernet QP's next receive WQE, or dropped. */
static void qhca_eth_deliver(QhcaState *s, const QhcaEthFrame *f)
{
    QhcaQp *qp = s->eth_qp;
    const QhcaRecv *r = qp ? &qp->recv : NULL;
    uint64_t total;
    const char *why;
    uint16_t sum;
    uint8_t st;

    if (!qhca_eth_active(s)) {
        /* It left RTR/RTS (or went) since the frame arrived. */
        qhca_eth_drop(s, f->len, "no Ethernet QP ready to receive");
        return;
    }
    if (!qhca_recv_posted(qp)) {
        qhca_eth_drop(s, f->len, "no receive WQE");
        return;
    }
    if (!qhca_recv_take(s, qp, &why)) {
        qhca_wqe_fail(s, qp, false, "Ethernet", r->wr_id, QHCA_WC_RECV,
                      QHCA_WC_LOC_QP_OP_ERR, why);
        return;
    }
    st = qhca_sge_check(s, r->pdn, r->sge, r->num_sge, true, &total);
    if (st != QHCA_WC_SUCCESS) {
        qhca_wqe_fail(s, qp, false, "Ethernet", r->wr_id, QHCA_WC_RECV, st,
                      "receive SGE refused");
        return;
    }
    if (total < f->len) {
        qhca_eth_drop(s, f->len, "larger than the receive WQE");
        return;
    }
    /*
     * Receive buffers are pinned (physical regions, as the kernel has
     * them): a page not present is a buffer the device cannot use.
     */
    st = qhca_sge_ready(s, r->pdn, r->sge, r->num_sge, f->len);
    if (st == QHCA_WC_SUCCESS) {
        st = qhca_sge_copy(s, r->pdn, r->sge, r->num_sge, 0, (void *)f->data,
                           f->len, true);
    }
    if (st != QHCA_WC_SUCCESS) {
        qhca_wqe_fail(s, qp, false, "Ethernet", r->wr_id, QHCA_WC_RECV,
                      st == QHCA_WC_ODP_FAULT ? QHCA_WC_LOC_ACCESS_ERR : st,
                      "receive buffer unreachable");
        return;
    }
    sum = qhca_eth_sum(f->data + QHCA_ETH_HLEN, f->len - QHCA_ETH_HLEN);
    trace_qhca_eth_rx(qhca_qpn(s, qp), r->index, f->len, sum);
    s->port.eth_rx_frames++;
    qhca_recv_done(qp);
    qhca_complete(s, qp, qp->rcqn, r->index, r->wr_id, QHCA_WC_RECV,
                  QHCA_WC_SUCCESS, f->len, QHCA_CQE_CSUM, sum);
}

/*
 * The engine's bottom half: up to *budget queued frames delivered, in
 * order; true if more wait.
 */
bool qhca_eth_poll(QhcaState *s, unsigned *budget)
{
    QhcaEthFrame *f;

    if (!s->eth) {
        return false;
    }
    while (*budget && !s->reset_pending &&
           (f = g_queue_pop_head(&s->eth->rx))) {
        (*budget)--;
        qhca_eth_deliver(s, f);
        g_free(f);
    }
    return !g_queue_is_empty(&s->eth->rx);
}

bool qhca_eth_pending(const QhcaState *s)
{
    return s->eth && !g_queue_is_empty(&s->eth->rx);
}

/* ------------------------------------------------------------------------ */
/* send                                                                     */

/*
 * Reads and checks the WQE at sq.ci and gathers its frame into f
 * (QHCA_ETH_FRAME_MAX bytes), checksum included: its length in *len.
 * Returns a qhca_wc_status, *why saying what was wrong.
 */
static uint8_t qhca_eth_build(QhcaState *s, QhcaQp *qp, QhcaSendWqe *w,
                              uint8_t *f, size_t *len, const char **why)
{
    struct qhca_wqe_ctrl ctrl;
    uint32_t start, offset;
    uint8_t st;

    if (!qhca_wq_read(s, qp, &qp->sq, qp->sq.ci, 0, &ctrl, sizeof(ctrl))) {
        *why = "ring unreachable";
        return QHCA_WC_LOC_QP_OP_ERR;
    }
    w->wr_id = le64_to_cpu(ctrl.wr_id);
    w->opcode = ctrl.opcode;
    w->flags = ctrl.flags;
    w->num_sge = ctrl.num_sge;
    w->imm = le32_to_cpu(ctrl.imm_data);
    w->inline_len = le32_to_cpu(ctrl.inline_len);
    if (w->opcode != QHCA_WR_SEND ||
        (w->flags & ~(QHCA_WQE_SIGNALED | QHCA_WQE_INLINE | QHCA_WQE_FENCE |
                      QHCA_WQE_CSUM)) ||
        ctrl.rsvd0 || ctrl.rsvd1[0] || ctrl.rsvd1[1] || ctrl.rsvd1[2]) {
        *why = "not a SEND, bad flags or reserved field";
        return QHCA_WC_LOC_QP_OP_ERR;
    }

    /* Inline bytes straight into the frame (max_inline <= 256). */
    QEMU_BUILD_BUG_ON(QHCA_LIMIT_MAX_INLINE > QHCA_ETH_FRAME_MAX);
    st = qhca_send_wqe_data(s, qp, qp->sq.ci, QHCA_WQE_DATA_OFFSET, w, f,
                            why);
    if (st != QHCA_WC_SUCCESS) {
        return st;
    }
    if (w->length < QHCA_ETH_HLEN || w->length > QHCA_ETH_FRAME_MAX) {
        *why = "frame shorter than its Ethernet header or longer than"
               " QHCA_ETH_FRAME_MAX";
        return QHCA_WC_LOC_LEN_ERR;
    }
    *len = w->length;
    if (!(w->flags & QHCA_WQE_INLINE)) {
        st = qhca_sge_copy(s, qp->pdn, w->sge, w->num_sge, 0, f, *len, false);
        if (st != QHCA_WC_SUCCESS) {
            *why = "local SGE unreachable";
            /* Not resumable here: the kernel's regions are pinned. */
            return st == QHCA_WC_ODP_FAULT ? QHCA_WC_LOC_PROT_ERR : st;
        }
    }
    if (memcmp(f + ETH_ALEN, s->conf.macaddr.a, ETH_ALEN)) {
        *why = "the source MAC is not the port's";
        return QHCA_WC_LOC_QP_OP_ERR;
    }
    if (w->flags & QHCA_WQE_CSUM) {
        start = w->imm & 0xffff;
        offset = w->imm >> 16;
        if (start < QHCA_ETH_HLEN || start + offset + 2 > *len) {
            *why = "checksum start or offset outside the frame";
            return QHCA_WC_LOC_QP_OP_ERR;
        }
        qhca_eth_csum_fill(f, *len, start, offset);
    }
    return QHCA_WC_SUCCESS;
}

/*
 * The Ethernet QP's turn in RTS: one frame per WQE, in SQ order, a budget
 * unit each.  true if it stopped for the budget alone, or went to ERR.
 */
bool qhca_eth_run(QhcaState *s, QhcaQp *qp, unsigned *budget)
{
    uint8_t *f = s->eth->frame;

    while (qp->state == QHCA_QPS_RTS) {
        NetClientState *nc = qemu_get_queue(s->nic);
        QhcaSendWqe w = { 0 };
        const char *why = NULL;
        size_t len = 0;
        uint8_t st;

        if (qp->sq.ci == qp->sq.pi) {
            return false;
        }
        if (!*budget) {
            return true;
        }
        (*budget)--;
        st = qhca_eth_build(s, qp, &w, f, &len, &why);
        if (st != QHCA_WC_SUCCESS) {
            qhca_wqe_fail(s, qp, true, "Ethernet", w.wr_id, QHCA_WC_SEND,
                          st, why);
            break;
        }
        trace_qhca_eth_tx(qhca_qpn(s, qp), qp->sq.ci, len,
                          w.flags & QHCA_WQE_CSUM);
        qp->sq.ci++;
        if (!s->reset_pending && !nc->link_down) {
            /* A NIC's frame: no x-loss-*, not in tx_frames. */
            s->port.eth_tx_frames++;
            qemu_send_packet(nc, f, len);
        }
        if (w.flags & QHCA_WQE_SIGNALED) {
            qhca_complete(s, qp, qp->scqn, qp->sq.ci - 1, w.wr_id,
                          QHCA_WC_SEND, QHCA_WC_SUCCESS, 0, 0, 0);
        }
    }
    return qp->state == QHCA_QPS_ERR;
}
