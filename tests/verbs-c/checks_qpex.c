// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * qhca-verbs-check: extended QPs (ibv_create_qp_ex with send_ops_flags) and
 * the work-request API (ibv_wr_start, ibv_wr_*, ibv_wr_complete,
 * ibv_wr_abort), as a program uses them. An RC pair connected in loopback
 * posts one batch of RDMA WRITE, an inline SEND, SEND_WITH_IMM, RDMA READ
 * and FETCH_AND_ADD, checked by data and by completions (opcode, wr_id,
 * byte_len, imm); an aborted batch and one with too many SGEs (whose
 * ibv_wr_complete fails) post nothing, and the QP goes on working after
 * them. A UD pair sends with ibv_wr_send and ibv_wr_set_ud_addr.
 */

#define _GNU_SOURCE

#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "verbs_check.h"

#define QPEX_QKEY 0x22221111u
#define GRH_BYTES 40
#define IMM       0xabcd1234u

/* An extended QP of @type on @cq, with the work-request API of @ops. */
static struct ibv_qp *qpex_new(struct env *e, struct ibv_cq *cq,
                               enum ibv_qp_type type, uint64_t ops,
                               struct ibv_qp_cap *cap)
{
    struct ibv_qp_init_attr_ex init;
    struct ibv_qp *qp;

    memset(&init, 0, sizeof(init));
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = type;
    init.cap.max_send_wr = 64;
    init.cap.max_recv_wr = 64;
    init.cap.max_send_sge = 2;
    init.cap.max_recv_sge = 2;
    init.cap.max_inline_data = type == IBV_QPT_RC ? 64 : 0;
    init.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    init.pd = e->pd;
    init.send_ops_flags = ops;
    qp = ibv_create_qp_ex(e->ctx, &init);
    if (!qp) {
        FAIL("ibv_create_qp_ex(type %d, send_ops_flags 0x%" PRIx64 "): %s",
             type, ops, strerror(errno));
        return NULL;
    }
    if (!ibv_qp_to_qp_ex(qp)) {
        FAIL("ibv_qp_to_qp_ex of an extended QP is NULL");
        ibv_destroy_qp(qp);
        return NULL;
    }
    if (cap) {
        *cap = init.cap;
    }
    return qp;
}

/* The receive at @i of @wc: @wr_id, RECV, @len bytes, @imm if @with_imm. */
static int recv_ok(const struct ibv_wc *wc, uint64_t wr_id, uint32_t len,
                   int with_imm)
{
    if (wc_ok(wc, wr_id, IBV_WC_RECV)) {
        return -1;
    }
    if (wc->byte_len != len) {
        return FAIL("receive %" PRIu64 ": byte_len %u, expected %u", wr_id,
                    wc->byte_len, len);
    }
    if (with_imm && (!(wc->wc_flags & IBV_WC_WITH_IMM) ||
                     be32toh(wc->imm_data) != IMM)) {
        return FAIL("receive %" PRIu64 ": wc_flags 0x%x imm 0x%x, expected "
                    "0x%x",
                    wr_id, wc->wc_flags, be32toh(wc->imm_data), IMM);
    }
    if (!with_imm && (wc->wc_flags & IBV_WC_WITH_IMM)) {
        return FAIL("receive %" PRIu64 ": IBV_WC_WITH_IMM without one", wr_id);
    }
    return 0;
}

int check_qp_ex(struct env *e)
{
    const uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND |
                         IBV_QP_EX_WITH_RDMA_READ |
                         IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
                         IBV_QP_EX_WITH_SEND_WITH_IMM;
    static const char msg[32] = "inline data of ibv_wr_send, 32B";
    struct ibv_cq *cq_a = NULL, *cq_b = NULL;
    struct ibv_qp *a = NULL, *b = NULL;
    struct ibv_qp_ex *qx;
    struct ibv_qp_cap cap;
    struct ibv_sge many[8];
    struct region r = { 0 };
    struct ibv_wc wc[5];
    uint8_t *src, *dst, *rsrc, *rdst, *rcv;
    uint64_t *counter, *old;
    uint32_t lkey, rkey, i;
    int rc, ret = -1;

    cq_a = ibv_create_cq(e->ctx, 64, NULL, NULL, 0);
    cq_b = ibv_create_cq(e->ctx, 64, NULL, NULL, 0);
    CHECK(cq_a && cq_b, "ibv_create_cq: %s", strerror(errno));
    a = qpex_new(e, cq_a, IBV_QPT_RC, ops, &cap);
    if (!a) {
        goto out;
    }
    b = qpex_new(e, cq_b, IBV_QPT_RC, ops, NULL);
    if (!b) {
        goto out;
    }
    TRY(rc_connect(a, b->qp_num, 0x100, 0x200));
    TRY(rc_connect(b, a->qp_num, 0x200, 0x100));
    TRY(region_new(e->pd, &r, 8192, REMOTE_ALL));
    lkey = r.mr->lkey;
    rkey = r.mr->rkey;
    src = r.buf;
    rsrc = r.buf + 1024;
    rdst = r.buf + 2048;
    rcv = r.buf + 3072;
    dst = r.buf + 4096;
    counter = (uint64_t *)(r.buf + 6144);
    old = (uint64_t *)(r.buf + 6152);
    fill(src, 256, 10);
    fill(rsrc, 32, 20);
    *counter = 10;
    *old = 0;
    qx = ibv_qp_to_qp_ex(a);
    TRY(post_recv(b, 100, rcv, 64, lkey));
    TRY(post_recv(b, 101, rcv + 64, 64, lkey));

    /* One batch of five ops, each with its wr_id and flags. */
    ibv_wr_start(qx);
    qx->wr_id = 1;
    qx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(qx, rkey, addr_of(dst));
    ibv_wr_set_sge(qx, lkey, addr_of(src), 64);
    qx->wr_id = 2;
    ibv_wr_send(qx);
    ibv_wr_set_inline_data(qx, (void *)msg, sizeof(msg));
    qx->wr_id = 3;
    ibv_wr_send_imm(qx, htobe32(IMM));
    ibv_wr_set_sge(qx, lkey, addr_of(src + 64), 16);
    qx->wr_id = 4;
    ibv_wr_rdma_read(qx, rkey, addr_of(rsrc));
    ibv_wr_set_sge(qx, lkey, addr_of(rdst), 32);
    qx->wr_id = 5;
    ibv_wr_atomic_fetch_add(qx, rkey, addr_of(counter), 5);
    ibv_wr_set_sge(qx, lkey, addr_of(old), 8);
    rc = ibv_wr_complete(qx);
    CHECK(rc == 0, "ibv_wr_complete: %s", strerror(rc));

    TRY(wait_wc(cq_a, wc, 5, TIMEOUT_MS));
    TRY(wc_ok(&wc[0], 1, IBV_WC_RDMA_WRITE));
    TRY(wc_ok(&wc[1], 2, IBV_WC_SEND));
    TRY(wc_ok(&wc[2], 3, IBV_WC_SEND));
    TRY(wc_ok(&wc[3], 4, IBV_WC_RDMA_READ));
    TRY(wc_ok(&wc[4], 5, IBV_WC_FETCH_ADD));
    CHECK(wc[3].byte_len == 32 && wc[4].byte_len == 8,
          "READ byte_len %u (expected 32), FETCH_ADD byte_len %u (expected 8)",
          wc[3].byte_len, wc[4].byte_len);
    TRY(wait_wc(cq_b, wc, 2, TIMEOUT_MS));
    TRY(recv_ok(&wc[0], 100, sizeof(msg), 0));
    TRY(recv_ok(&wc[1], 101, 16, 1));
    CHECK(!memcmp(dst, src, 64), "RDMA WRITE: data differs");
    CHECK(!memcmp(rcv, msg, sizeof(msg)), "inline SEND: data differs");
    CHECK(!memcmp(rcv + 64, src + 64, 16), "SEND_WITH_IMM: data differs");
    CHECK(!memcmp(rdst, rsrc, 32), "RDMA READ: data differs");
    CHECK(*old == 10 && *counter == 15,
          "FETCH_AND_ADD: old %" PRIu64 " (expected 10), now %" PRIu64
          " (expected 15)",
          *old, *counter);

    /* An aborted batch posts nothing. */
    TRY(post_recv(b, 102, rcv, 64, lkey));
    ibv_wr_start(qx);
    qx->wr_id = 6;
    ibv_wr_send(qx);
    ibv_wr_set_sge(qx, lkey, addr_of(src), 16);
    ibv_wr_abort(qx);
    TRY(expect_quiet(cq_a, QUIET_MS, "an aborted batch"));
    TRY(expect_quiet(cq_b, 0, "an aborted batch"));

    /*
     * Too many SGEs: ibv_wr_complete fails, and not even the WRITE before
     * the bad request is posted.
     */
    CHECK(cap.max_send_sge < sizeof(many) / sizeof(many[0]),
          "max_send_sge %u", cap.max_send_sge);
    for (i = 0; i <= cap.max_send_sge; i++) {
        many[i] = (struct ibv_sge){ addr_of(src + 8 * i), 8, lkey };
    }
    memset(dst, 0, 64);
    ibv_wr_start(qx);
    qx->wr_id = 7;
    ibv_wr_rdma_write(qx, rkey, addr_of(dst));
    ibv_wr_set_sge(qx, lkey, addr_of(src), 64);
    qx->wr_id = 8;
    ibv_wr_send(qx);
    ibv_wr_set_sge_list(qx, cap.max_send_sge + 1, many);
    rc = ibv_wr_complete(qx);
    CHECK(rc == EINVAL,
          "ibv_wr_complete with %u SGEs: %d (%s), expected EINVAL",
          cap.max_send_sge + 1, rc, strerror(rc));
    TRY(expect_quiet(cq_a, QUIET_MS, "a failed batch"));
    TRY(expect_quiet(cq_b, 0, "a failed batch"));
    CHECK(dst[0] == 0, "a failed batch wrote data");

    /* The QP still works, and the receive posted above takes the next SEND. */
    ibv_wr_start(qx);
    qx->wr_id = 9;
    ibv_wr_send(qx);
    ibv_wr_set_sge(qx, lkey, addr_of(src), 16);
    rc = ibv_wr_complete(qx);
    CHECK(rc == 0, "ibv_wr_complete after a failed batch: %s", strerror(rc));
    TRY(wait_wc(cq_a, wc, 1, TIMEOUT_MS));
    TRY(wc_ok(&wc[0], 9, IBV_WC_SEND));
    TRY(wait_wc(cq_b, wc, 1, TIMEOUT_MS));
    TRY(recv_ok(&wc[0], 102, 16, 0));
    ret = 0;
out:
    pair_destroy(&(struct pair){ .a = a, .b = b, .cq_a = cq_a, .cq_b = cq_b });
    region_free(&r);
    return ret;
}

/* RESET -> INIT -> RTR -> RTS of a UD QP with Q_Key QPEX_QKEY. */
static int ud_up(struct ibv_qp *qp)
{
    struct ibv_qp_attr at;
    int rc;

    memset(&at, 0, sizeof(at));
    at.qp_state = IBV_QPS_INIT;
    at.port_num = PORT;
    at.qkey = QPEX_QKEY;
    rc = ibv_modify_qp(qp, &at,
                       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                           IBV_QP_QKEY);
    if (!rc) {
        memset(&at, 0, sizeof(at));
        at.qp_state = IBV_QPS_RTR;
        rc = ibv_modify_qp(qp, &at, IBV_QP_STATE);
    }
    if (!rc) {
        memset(&at, 0, sizeof(at));
        at.qp_state = IBV_QPS_RTS;
        at.sq_psn = 0x500;
        rc = ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_SQ_PSN);
    }
    return rc ? FAIL("UD ibv_modify_qp: %s", strerror(rc)) : 0;
}

int check_qp_ex_ud(struct env *e)
{
    struct ibv_cq *cq_a = NULL, *cq_b = NULL;
    struct ibv_qp *a = NULL, *b = NULL;
    struct ibv_ah *ah = NULL;
    struct ibv_ah_attr aa;
    struct ibv_qp_ex *qx;
    struct region r = { 0 };
    struct ibv_wc wc;
    int rc, ret = -1;

    cq_a = ibv_create_cq(e->ctx, 64, NULL, NULL, 0);
    cq_b = ibv_create_cq(e->ctx, 64, NULL, NULL, 0);
    CHECK(cq_a && cq_b, "ibv_create_cq: %s", strerror(errno));
    a = qpex_new(e, cq_a, IBV_QPT_UD, IBV_QP_EX_WITH_SEND, NULL);
    if (!a) {
        goto out;
    }
    b = qpex_new(e, cq_b, IBV_QPT_UD, IBV_QP_EX_WITH_SEND, NULL);
    if (!b) {
        goto out;
    }
    TRY(ud_up(a));
    TRY(ud_up(b));
    TRY(region_new(e->pd, &r, 8192, IBV_ACCESS_LOCAL_WRITE));
    memset(&aa, 0, sizeof(aa));
    aa.is_global = 1;
    aa.grh.dgid = e->gid;
    aa.grh.hop_limit = 64;
    aa.port_num = PORT;
    ah = ibv_create_ah(e->pd, &aa);
    CHECK(ah, "ibv_create_ah: %s", strerror(errno));

    fill(r.buf, 100, 30);
    TRY(post_recv(b, 200, r.buf + 4096, GRH_BYTES + 100, r.mr->lkey));
    qx = ibv_qp_to_qp_ex(a);
    ibv_wr_start(qx);
    qx->wr_id = 20;
    qx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(qx);
    ibv_wr_set_ud_addr(qx, ah, b->qp_num, QPEX_QKEY);
    ibv_wr_set_sge(qx, r.mr->lkey, addr_of(r.buf), 100);
    rc = ibv_wr_complete(qx);
    CHECK(rc == 0, "ibv_wr_complete (UD): %s", strerror(rc));
    TRY(wait_wc(cq_a, &wc, 1, TIMEOUT_MS));
    TRY(wc_ok(&wc, 20, IBV_WC_SEND));
    TRY(wait_wc(cq_b, &wc, 1, TIMEOUT_MS));
    TRY(recv_ok(&wc, 200, GRH_BYTES + 100, 0));
    CHECK(wc.src_qp == a->qp_num, "UD receive: src_qp %u, expected %u",
          wc.src_qp, a->qp_num);
    CHECK(!memcmp(r.buf + 4096 + GRH_BYTES, r.buf, 100),
          "UD SEND: data differs");
    ret = 0;
out:
    if (ah) {
        ibv_destroy_ah(ah);
    }
    pair_destroy(&(struct pair){ .a = a, .b = b, .cq_a = cq_a, .cq_b = cq_b });
    region_free(&r);
    return ret;
}
