/*
 * qhca: an emulated RDMA host channel adapter -- unreliable datagram
 *
 * Address handles (CREATE_AH, DESTROY_AH), the UD sender (a QP turn takes
 * send WQEs in order, each one datagram that leaves at once and completes
 * at once: no PSN window, no ACK, no retry) and the UD receiver (a datagram
 * lands in the QP's oldest receive WQE behind a GRH, or is dropped and
 * counted).  The rules are in the ABI header and docs/specs/qhca.rst,
 * "Unreliable datagram".  What RC and UD share (memory through keys,
 * completion queues, QP state, the wire, the scheduler) is in qhca-rc.c.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include "qemu/bswap.h"
#include "qhca-rc.h"
#include "trace.h"

#define QHCA_AH_SLOT_MASK   (QHCA_LIMIT_MAX_AH - 1)
#define QHCA_AH_GEN_MASK    ((1u << (24 - QHCA_AH_INDEX_BITS)) - 1)

/* RoCEv2: the IPv6 header's next header is UDP. */
#define QHCA_GRH_NEXT_UDP   17

/* ------------------------------------------------------------------------ */
/* address handles                                                          */

/* The AH that number names, generation included. */
static QhcaAh *qhca_ah_lookup(QhcaState *s, uint64_t number)
{
    QhcaAh *ah = &s->ah[number & QHCA_AH_SLOT_MASK];

    return number <= UINT32_MAX && ah->in_use && ah->index == number ? ah
                                                                     : NULL;
}

static void qhca_ah_free(QhcaState *s, QhcaAh *ah)
{
    trace_qhca_obj("ah", "destroy", ah->uar, ah->index);
    s->pd[ah->pdn].nr_ah--;
    ah->in_use = false;
    s->num_ah--;
}

static uint8_t qhca_cmd_create_ah(QhcaState *s, const struct qhca_cmd *cmd,
                                  uint64_t *data)
{
    struct qhca_cmd_create_ah in;
    uint32_t uar, pdn, n;
    QhcaPd *pd;
    QhcaAv av;
    uint8_t st;

    if (!qhca_cmd_unused_zero(cmd, false, 5)) {
        return QHCA_CMD_BAD_PARAM;
    }
    qhca_cmd_in_bytes(cmd, &in, sizeof(in));
    uar = le32_to_cpu(in.uar);
    pdn = le32_to_cpu(in.pdn);
    /*
     * The destination GID: any of the source entry's kind (a port not on
     * the fabric loses the datagrams).
     */
    st = qhca_av_load(s, &in.attr, &av);
    if (st != QHCA_CMD_OK) {
        return st;
    }
    if (!qhca_uar_valid(s, uar)) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    pd = qhca_pd_lookup(s, pdn);
    if (!pd || pd->uar != uar) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    for (n = 0; n < QHCA_LIMIT_MAX_AH; n++) {
        uint32_t slot = (s->ah_next + n) & QHCA_AH_SLOT_MASK;
        QhcaAh *ah = &s->ah[slot];
        uint32_t gen;

        if (ah->in_use) {
            continue;
        }
        /* The next generation of the slot; 0 is skipped, so no AH is 0. */
        gen = ((ah->index >> QHCA_AH_INDEX_BITS) + 1) & QHCA_AH_GEN_MASK;
        *ah = (QhcaAh) {
            .in_use = true,
            .index = MAX(gen, 1) << QHCA_AH_INDEX_BITS | slot,
            .uar = uar,
            .pdn = pdn,
            .av = av,
        };
        pd->nr_ah++;
        s->num_ah++;
        s->ah_next = (slot + 1) & QHCA_AH_SLOT_MASK;
        data[0] = ah->index;
        trace_qhca_obj("ah", "create", uar, ah->index);
        return QHCA_CMD_OK;
    }
    return QHCA_CMD_NO_RESOURCES;
}

static uint8_t qhca_cmd_destroy_ah(QhcaState *s, const struct qhca_cmd *cmd)
{
    QhcaAh *ah;

    if (!qhca_cmd_unused_zero(cmd, false, 2)) {
        return QHCA_CMD_BAD_PARAM;
    }
    ah = qhca_ah_lookup(s, cmd->in[1]);
    if (!ah || ah->uar != cmd->in[0] || !qhca_uar_valid(s, cmd->in[0])) {
        return QHCA_CMD_BAD_RESOURCE;
    }
    qhca_ah_free(s, ah);
    return QHCA_CMD_OK;
}

uint8_t qhca_cmd_ah(QhcaState *s, const struct qhca_cmd *cmd, uint64_t *data)
{
    switch (cmd->opcode) {
    case QHCA_CMD_CREATE_AH:
        return qhca_cmd_create_ah(s, cmd, data);
    case QHCA_CMD_DESTROY_AH:
        return qhca_cmd_destroy_ah(s, cmd);
    default:
        return QHCA_CMD_BAD_OPCODE;
    }
}

void qhca_ah_free_ctx(QhcaState *s, uint32_t uar)
{
    uint32_t i;

    for (i = 0; i < QHCA_LIMIT_MAX_AH; i++) {
        if (s->ah[i].in_use && s->ah[i].uar == uar) {
            qhca_ah_free(s, &s->ah[i]);
        }
    }
}

/* ------------------------------------------------------------------------ */
/* sender                                                                   */

/*
 * Reads and checks the WQE at sq.ci, gathers its message into pkt and
 * fills in the header its AH and UD segment give.  Returns a
 * qhca_wc_status, or QHCA_WC_ODP_FAULT (s->fault says where).
 */
static uint8_t qhca_ud_build(QhcaState *s, QhcaQp *qp, QhcaSendWqe *w,
                             QhcaPkt *pkt, const char **why)
{
    struct {
        struct qhca_wqe_ctrl ctrl;
        struct qhca_wqe_ud ud;
    } hdr;
    uint32_t qkey, remote_qpn, data_off = QHCA_WQE_DATA_OFFSET;
    const QhcaAv *av;
    uint64_t total;
    QhcaAv wqe_av;
    QhcaAh *ah;
    uint8_t st;

    if (!qhca_wq_read(s, qp, &qp->sq, qp->sq.ci, 0, &hdr, sizeof(hdr))) {
        *why = "ring unreachable";
        return QHCA_WC_LOC_QP_OP_ERR;
    }
    w->wr_id = le64_to_cpu(hdr.ctrl.wr_id);
    w->opcode = hdr.ctrl.opcode;
    w->flags = hdr.ctrl.flags;
    w->num_sge = hdr.ctrl.num_sge;
    w->imm = le32_to_cpu(hdr.ctrl.imm_data);
    w->inline_len = le32_to_cpu(hdr.ctrl.inline_len);
    remote_qpn = le32_to_cpu(hdr.ud.remote_qpn);
    qkey = le32_to_cpu(hdr.ud.remote_qkey);
    if ((w->opcode != QHCA_WR_SEND && w->opcode != QHCA_WR_SEND_WITH_IMM) ||
        (w->flags & ~(QHCA_WQE_SIGNALED | QHCA_WQE_SOLICITED |
                      QHCA_WQE_INLINE | QHCA_WQE_FENCE | QHCA_WQE_AV)) ||
        hdr.ctrl.rsvd0 || hdr.ctrl.rsvd1[0] || hdr.ctrl.rsvd1[1] ||
        hdr.ctrl.rsvd1[2] || hdr.ud.rsvd || remote_qpn > QHCA_DB_QN_MASK) {
        *why = "not a SEND, bad flags or reserved field";
        return QHCA_WC_LOC_QP_OP_ERR;
    }
    if (w->flags & QHCA_WQE_AV) {
        /*
         * A kernel context's datagram carries its address vector, which is
         * checked as CREATE_AH checks one.
         */
        struct qhca_ah_attr in;

        if (!qhca_uar_kernel(s, qp->uar) || hdr.ud.ah) {
            *why = "address vector in the WQE outside a kernel context";
            return QHCA_WC_LOC_QP_OP_ERR;
        }
        if (!qhca_wq_read(s, qp, &qp->sq, qp->sq.ci, QHCA_WQE_DATA_OFFSET,
                          &in, sizeof(in))) {
            *why = "ring unreachable";
            return QHCA_WC_LOC_QP_OP_ERR;
        }
        if (qhca_av_load(s, &in, &wqe_av) != QHCA_CMD_OK) {
            *why = "bad address vector in the WQE";
            return QHCA_WC_LOC_QP_OP_ERR;
        }
        av = &wqe_av;
        data_off = QHCA_WQE_AV_DATA_OFFSET;
    } else {
        ah = qhca_ah_lookup(s, le32_to_cpu(hdr.ud.ah));
        if (!ah || ah->uar != qp->uar || ah->pdn != qp->pdn) {
            *why = "no such address handle in the QP's PD";
            return QHCA_WC_LOC_QP_OP_ERR;
        }
        av = &ah->av;
    }

    /* Inline bytes straight into the datagram. */
    st = qhca_send_wqe_data(s, qp, qp->sq.ci, data_off, w, pkt->payload, why);
    if (st != QHCA_WC_SUCCESS) {
        return st;
    }
    total = w->length;
    if (!(w->flags & QHCA_WQE_INLINE)) {
        if (total > QHCA_UD_MAX_MSG) {
            *why = "datagram longer than the port's MTU";
            return QHCA_WC_LOC_LEN_ERR;
        }
        st = qhca_sge_copy(s, qp->pdn, w->sge, w->num_sge, 0, pkt->payload,
                           total, false);
        if (st != QHCA_WC_SUCCESS) {
            *why = "local SGE unreachable";
            return st;
        }
    }

    pkt->opcode = w->opcode == QHCA_WR_SEND_WITH_IMM ?
                  QHCA_OP_UD_SEND_ONLY_IMM : QHCA_OP_UD_SEND_ONLY;
    pkt->imm = w->opcode == QHCA_WR_SEND_WITH_IMM ? w->imm : 0;
    pkt->len = total;
    pkt->psn = qp->sq_psn;
    pkt->dest_qpn = remote_qpn;
    /* IBA 10.2.5: the high-order bit set means the QP's own Q_Key. */
    pkt->qkey = qkey & QHCA_QKEY_CONTROLLED ? qp->qkey : qkey;
    memcpy(pkt->sgid, av->sgid, sizeof(pkt->sgid));
    memcpy(pkt->dgid, av->dgid, sizeof(pkt->dgid));
    pkt->flow_label = av->flow_label;
    pkt->traffic_class = av->traffic_class;
    pkt->hop_limit = av->hop_limit;
    return QHCA_WC_SUCCESS;
}

/*
 * The UD part of a QP turn in RTS: one datagram per WQE, in SQ order, a
 * budget unit each.  true if it stopped for the budget alone.
 */
bool qhca_ud_run(QhcaState *s, QhcaQp *qp, unsigned *budget)
{
    while (qp->state == QHCA_QPS_RTS) {
        QhcaSendWqe w = { 0 };
        const char *why = NULL;
        QhcaPkt *pkt;
        uint8_t st;

        if (qp->req_fault_failed) {
            /* The page the WQE at sq.ci needed could not be had. */
            struct qhca_wqe_ctrl ctrl = { 0 };

            qp->req_fault_failed = false;
            qhca_wq_read(s, qp, &qp->sq, qp->sq.ci, 0, &ctrl, sizeof(ctrl));
            qhca_wqe_fail(s, qp, true, "UD", le64_to_cpu(ctrl.wr_id),
                          qhca_wc_opcode(ctrl.opcode), QHCA_WC_LOC_PROT_ERR,
                          "page fault not resolved");
            break;
        }
        if (qp->req_wait || qp->req_fault || qp->sq.ci == qp->sq.pi) {
            return false;
        }
        if (!*budget) {
            return true;
        }
        (*budget)--;
        pkt = qhca_pkt_new(s);
        st = qhca_ud_build(s, qp, &w, pkt, &why);
        if (st == QHCA_WC_ODP_FAULT) {
            /* Nothing left; the WQE is built again after RESUME. */
            qhca_pkt_free(s, pkt);
            qhca_req_fault(s, qp, qp->sq.ci, false);
            return false;
        }
        if (st != QHCA_WC_SUCCESS) {
            qhca_pkt_free(s, pkt);
            qhca_wqe_fail(s, qp, true, "UD", w.wr_id,
                          qhca_wc_opcode(w.opcode), st, why);
            break;
        }
        QHCA_TRACE_STEP(QHCA_REQ_SEND, qhca_req_send, qhca_qpn(s, qp),
                        qp->sq.ci, pkt->opcode, pkt->psn, pkt->len);
        qp->sq_psn = psn_add(qp->sq_psn, 1);
        qp->sq.ci++;
        if (!s->reset_pending) {
            pkt->src_qpn = qhca_qpn(s, qp);
            qhca_wire_send(s->wire, pkt);
        }
        qhca_pkt_free(s, pkt);
        /* The wire may have run the receiver (this very QP, even). */
        if (w.flags & QHCA_WQE_SIGNALED) {
            qhca_complete(s, qp, qp->scqn, qp->sq.ci - 1, w.wr_id,
                          QHCA_WC_SEND, QHCA_WC_SUCCESS, 0, 0, 0);
        }
    }
    return qp->state == QHCA_QPS_ERR;
}

/* ------------------------------------------------------------------------ */
/* receiver                                                                 */

static void qhca_ud_drop(QhcaState *s, const QhcaPkt *pkt, uint64_t *counter,
                         const char *why)
{
    if (counter) {
        (*counter)++;
    } else {
        qhca_count(&s->ud_no_qp);
    }
    trace_qhca_pkt_drop(pkt->dest_qpn, pkt->opcode, pkt->psn, why);
}

/*
 * The GRH the receiver finds in front of the message: between IPv6 GIDs
 * struct qhca_grh; between IPv4 ones, as RoCEv2 has it, 20 bytes of zeros
 * and the IPv4 header the datagram came with.
 */
static void qhca_ud_grh(QhcaState *s, const QhcaPkt *pkt, uint8_t *buf)
{
    uint32_t paylen = QHCA_BTH_SIZE + QHCA_DETH_SIZE +
                      (pkt->opcode == QHCA_OP_UD_SEND_ONLY_IMM ?
                       QHCA_IMMDT_SIZE : 0) +
                      ROUND_UP(pkt->len, 4) + QHCA_ICRC_SIZE;
    struct qhca_grh grh;

    if (qhca_gid_is_v4(pkt->sgid)) {
        memset(buf, 0, QHCA_GRH_SIZE - QHCA_IPV4_SIZE);
        qhca_ipv4_header(buf + QHCA_GRH_SIZE - QHCA_IPV4_SIZE, pkt,
                         QHCA_UDP_SIZE + paylen);
        return;
    }
    grh.version_tclass_flow = cpu_to_be32(6u << 28 |
                                          (uint32_t)pkt->traffic_class << 20 |
                                          pkt->flow_label);
    grh.paylen = cpu_to_be16(QHCA_UDP_SIZE + paylen);
    grh.next_hdr = QHCA_GRH_NEXT_UDP;
    grh.hop_limit = pkt->hop_limit;
    memcpy(grh.sgid, pkt->sgid, sizeof(grh.sgid));
    memcpy(grh.dgid, pkt->dgid, sizeof(grh.dgid));
    memcpy(buf, &grh, sizeof(grh));
}

void qhca_ud_recv(QhcaState *s, const QhcaPkt *pkt)
{
    QhcaQp *qp = qhca_qp_lookup(s, pkt->dest_qpn);
    const QhcaRecv *r;
    uint8_t grh[QHCA_GRH_SIZE];
    QhcaContext *ctx;
    uint64_t total;
    const char *why;
    uint8_t st;

    if (!qhca_gid_ours(s, pkt->dgid)) {
        qhca_ud_drop(s, pkt, NULL, "UD: no such port");
        return;
    }
    if (!qp || qp->type != QHCA_QPT_UD ||
        (qp->state != QHCA_QPS_RTR && qp->state != QHCA_QPS_RTS)) {
        qhca_ud_drop(s, pkt, NULL, "UD: no UD QP ready to receive");
        return;
    }
    ctx = &s->ctx[qp->uar];
    if (pkt->qkey != qp->qkey) {
        qhca_ud_drop(s, pkt, &ctx->ud_drop_qkey, "UD: Q_Key mismatch");
        return;
    }
    if (!qhca_recv_posted(qp)) {
        qhca_ud_drop(s, pkt, &ctx->ud_drop_no_recv, "UD: no receive WQE");
        return;
    }

    /*
     * A datagram dropped from here on leaves the WQE posted (an SRQ's
     * with this QP, for its next datagram).
     */
    r = &qp->recv;
    if (!qhca_recv_take(s, qp, &why)) {
        qhca_wqe_fail(s, qp, false, "UD", r->wr_id, QHCA_WC_RECV,
                      QHCA_WC_LOC_QP_OP_ERR, why);
        return;
    }
    st = qhca_sge_check(s, r->pdn, r->sge, r->num_sge, true, &total);
    if (st != QHCA_WC_SUCCESS) {
        qhca_wqe_fail(s, qp, false, "UD", r->wr_id, QHCA_WC_RECV, st,
                      "receive SGE refused");
        return;
    }
    if (total < QHCA_GRH_SIZE + (uint64_t)pkt->len) {
        qhca_ud_drop(s, pkt, &ctx->ud_drop_too_long,
                     "UD: larger than the receive WQE");
        return;
    }
    /* Every page present before anything is written. */
    st = qhca_sge_ready(s, r->pdn, r->sge, r->num_sge,
                        QHCA_GRH_SIZE + (uint64_t)pkt->len);
    if (st == QHCA_WC_ODP_FAULT) {
        qhca_ud_drop(s, pkt, &ctx->ud_drop_fault,
                     "UD: receive page not present");
        return;
    }
    qhca_ud_grh(s, pkt, grh);
    if (st == QHCA_WC_SUCCESS) {
        st = qhca_sge_copy(s, r->pdn, r->sge, r->num_sge, 0, grh, sizeof(grh),
                           true);
    }
    if (st == QHCA_WC_SUCCESS) {
        st = qhca_sge_copy(s, r->pdn, r->sge, r->num_sge, sizeof(grh),
                           (void *)pkt->payload, pkt->len, true);
    }
    if (st != QHCA_WC_SUCCESS) {
        qhca_wqe_fail(s, qp, false, "UD", r->wr_id, QHCA_WC_RECV,
                      st == QHCA_WC_ODP_FAULT ? QHCA_WC_LOC_ACCESS_ERR : st,
                      "receive buffer unreachable");
        return;
    }
    trace_qhca_ud_recv(qhca_qpn(s, qp), r->index, pkt->src_qpn, pkt->len);
    qhca_recv_done(qp);
    qhca_complete_src(s, qp, qp->rcqn, r->index, r->wr_id, QHCA_WC_RECV,
                      QHCA_WC_SUCCESS, QHCA_GRH_SIZE + pkt->len,
                      QHCA_CQE_WITH_GRH |
                      (pkt->opcode == QHCA_OP_UD_SEND_ONLY_IMM ?
                       QHCA_CQE_WITH_IMM : 0),
                      pkt->imm, pkt->src_qpn);
}
