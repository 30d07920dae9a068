// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * qhca-verbs-check: the checks beyond RC's data path (see main.c for the
 * program). UD QPs with address handles (with and without a GRH, and from a
 * work completion), on-demand paging (skipped if the device has none), and
 * memory windows of types 1 and 2 (each skipped if the device has none).
 */

#define _GNU_SOURCE

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "verbs_check.h"

#define UD_QKEY 0x11111111u
#define GRH_LEN 40

static int ud_ready(struct ibv_qp *qp, uint32_t sq_psn)
{
    struct ibv_qp_attr a;
    int rc;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = PORT;
    a.qkey = UD_QKEY;
    rc = ibv_modify_qp(
        qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
    if (rc) {
        return FAIL("UD ibv_modify_qp(INIT): %s", strerror(rc));
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    rc = ibv_modify_qp(qp, &a, IBV_QP_STATE);
    if (rc) {
        return FAIL("UD ibv_modify_qp(RTR): %s", strerror(rc));
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = sq_psn;
    rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    if (rc) {
        return FAIL("UD ibv_modify_qp(RTS): %s", strerror(rc));
    }
    return 0;
}

/* A UD SEND of @len bytes at @src from @qp to @qpn through @ah. */
static int ud_send(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_ah *ah,
                   uint32_t qpn, uint32_t qkey, const void *src, uint32_t len,
                   uint32_t lkey, uint64_t wr_id)
{
    struct ibv_sge sge = { addr_of(src), len, lkey };
    struct ibv_send_wr wr = {
        .wr_id = wr_id,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,
        .wr.ud = { .ah = ah, .remote_qpn = qpn, .remote_qkey = qkey },
    };
    struct ibv_wc wc;

    if (post_and_wait(qp, &wr, cq, &wc, 1)) {
        return -1;
    }
    return wc_ok(&wc, wr_id, IBV_WC_SEND);
}

int check_ud(struct env *e)
{
    struct ibv_cq *cq_a = NULL, *cq_b = NULL;
    struct ibv_qp *a = NULL, *b = NULL;
    struct ibv_ah *ah_g = NULL, *ah_l = NULL, *ah_r = NULL;
    struct ibv_ah_attr aa, from;
    struct region r = { 0 };
    struct ibv_grh *grh;
    struct ibv_wc wc;
    uint8_t *src, *rcv_b, *rcv_a;
    uint32_t off;
    int rc, ret = -1;

    cq_a = ibv_create_cq(e->ctx, 64, NULL, NULL, 0);
    cq_b = ibv_create_cq(e->ctx, 64, NULL, NULL, 0);
    CHECK(cq_a && cq_b, "ibv_create_cq: %s", strerror(errno));
    a = qp_new(e->pd, cq_a, IBV_QPT_UD, 0, NULL);
    if (!a) {
        goto out;
    }
    b = qp_new(e->pd, cq_b, IBV_QPT_UD, 0, NULL);
    if (!b) {
        goto out;
    }
    TRY(ud_ready(a, 0x300));
    TRY(ud_ready(b, 0x400));
    TRY(region_new(e->pd, &r, 8192, IBV_ACCESS_LOCAL_WRITE));
    src = r.buf;
    rcv_b = r.buf + 2048;
    rcv_a = r.buf + 4096;

    memset(&aa, 0, sizeof(aa));
    aa.is_global = 1;
    aa.grh.dgid = e->gid;
    aa.grh.sgid_index = 0;
    aa.grh.hop_limit = 64;
    aa.port_num = PORT;
    ah_g = ibv_create_ah(e->pd, &aa);
    CHECK(ah_g, "ibv_create_ah(is_global 1, our GID): %s", strerror(errno));
    memset(&aa, 0, sizeof(aa));
    aa.is_global = 0;
    aa.port_num = PORT;
    ah_l = ibv_create_ah(e->pd, &aa);
    if (e->roce) {
        /* The RDMA core refuses a RoCE address vector without a GRH. */
        CHECK(!ah_l && errno == EINVAL,
              "ibv_create_ah(is_global 0) on RoCE: %p, %s", (void *)ah_l,
              strerror(errno));
    } else {
        CHECK(ah_l, "ibv_create_ah(is_global 0): %s", strerror(errno));
    }

    /* A wrong Q_Key is dropped silently at the receiver. */
    fill(src, 100, 90);
    TRY(post_recv(b, 200, rcv_b, GRH_LEN + 100, r.mr->lkey));
    TRY(ud_send(a, cq_a, ah_g, b->qp_num, 0x22222222, src, 100, r.mr->lkey,
                80));
    TRY(expect_quiet(cq_b, QUIET_MS, "a SEND with the wrong Q_Key"));

    /* Through the AH with a GRH. */
    TRY(ud_send(a, cq_a, ah_g, b->qp_num, UD_QKEY, src, 100, r.mr->lkey, 81));
    TRY(wait_wc(cq_b, &wc, 1, TIMEOUT_MS));
    TRY(wc_ok(&wc, 200, IBV_WC_RECV));
    CHECK(wc.wc_flags & IBV_WC_GRH, "UD receive without IBV_WC_GRH");
    CHECK(wc.byte_len == GRH_LEN + 100,
          "UD receive: byte_len %u, "
          "expected %u",
          wc.byte_len, GRH_LEN + 100);
    CHECK(wc.src_qp == a->qp_num, "UD receive: src_qp 0x%x, sender 0x%x",
          wc.src_qp, a->qp_num);
    CHECK(wc.qp_num == b->qp_num, "UD receive: qp_num 0x%x", wc.qp_num);
    grh = (struct ibv_grh *)rcv_b;
    CHECK(!memcmp(&grh->sgid, &e->gid, sizeof(e->gid)),
          "the GRH's sgid is not our GID");
    CHECK(!memcmp(&grh->dgid, &e->gid, sizeof(e->gid)),
          "the GRH's dgid is not our GID");
    CHECK(!memcmp(rcv_b + GRH_LEN, src, 100), "UD SEND: data differs");

    /* The reply, to the address in the completion. */
    memset(&from, 0, sizeof(from));
    CHECK(!ibv_init_ah_from_wc(e->ctx, PORT, &wc, grh, &from),
          "ibv_init_ah_from_wc: %s", strerror(errno));
    CHECK(from.is_global && !memcmp(&from.grh.dgid, &e->gid, sizeof(e->gid)),
          "ibv_init_ah_from_wc: is_global %u, or dgid not the sender's",
          from.is_global);
    ah_r = ibv_create_ah_from_wc(e->pd, &wc, grh, PORT);
    CHECK(ah_r, "ibv_create_ah_from_wc: %s", strerror(errno));
    fill(src + 512, 60, 91);
    TRY(post_recv(a, 201, rcv_a, GRH_LEN + 100, r.mr->lkey));
    TRY(ud_send(b, cq_b, ah_r, wc.src_qp, UD_QKEY, src + 512, 60, r.mr->lkey,
                82));
    TRY(wait_wc(cq_a, &wc, 1, TIMEOUT_MS));
    TRY(wc_ok(&wc, 201, IBV_WC_RECV));
    CHECK(wc.src_qp == b->qp_num, "reply: src_qp 0x%x, sender 0x%x", wc.src_qp,
          b->qp_num);
    off = (wc.wc_flags & IBV_WC_GRH) ? GRH_LEN : 0;
    CHECK(wc.byte_len == off + 60, "reply: byte_len %u", wc.byte_len);
    CHECK(!memcmp(rcv_a + off, src + 512, 60), "reply: data differs");

    /* Through the AH without a GRH (the preloaded layer's own port). */
    if (ah_l) {
        fill(src, 100, 92);
        memset(rcv_b, 0, GRH_LEN + 100);
        TRY(post_recv(b, 202, rcv_b, GRH_LEN + 100, r.mr->lkey));
        TRY(ud_send(a, cq_a, ah_l, b->qp_num, UD_QKEY, src, 100, r.mr->lkey, 83));
        TRY(wait_wc(cq_b, &wc, 1, TIMEOUT_MS));
        TRY(wc_ok(&wc, 202, IBV_WC_RECV));
        off = (wc.wc_flags & IBV_WC_GRH) ? GRH_LEN : 0;
        CHECK(wc.byte_len == off + 100, "no-GRH AH: byte_len %u", wc.byte_len);
        CHECK(wc.src_qp == a->qp_num, "no-GRH AH: src_qp 0x%x", wc.src_qp);
        CHECK(!memcmp(rcv_b + off, src, 100), "no-GRH AH: data differs");
    }

    rc = ibv_destroy_ah(ah_r);
    ah_r = NULL;
    CHECK(!rc, "ibv_destroy_ah: %s", strerror(rc));
    if (ah_l) {
        rc = ibv_destroy_ah(ah_l);
        ah_l = NULL;
        CHECK(!rc, "ibv_destroy_ah: %s", strerror(rc));
    }
    rc = ibv_destroy_ah(ah_g);
    ah_g = NULL;
    CHECK(!rc, "ibv_destroy_ah: %s", strerror(rc));
    ret = 0;
out:
    if (ah_r) {
        ibv_destroy_ah(ah_r);
    }
    if (ah_l) {
        ibv_destroy_ah(ah_l);
    }
    if (ah_g) {
        ibv_destroy_ah(ah_g);
    }
    pair_destroy(&(struct pair){ .a = a, .b = b, .cq_a = cq_a, .cq_b = cq_b });
    region_free(&r);
    return ret;
}

int check_odp(struct env *e, const char **note)
{
    const size_t len = 64 * 1024;
    struct ibv_device_attr_ex ax;
    struct ibv_mr *mr = NULL, *imr = NULL;
    struct pair p = { 0 };
    struct region r = { 0 };
    struct ibv_sge sge;
    struct ibv_wc wc;
    uint8_t *odp = NULL, *ibuf = NULL, *page;
    int rc, ret = -1;

    memset(&ax, 0, sizeof(ax));
    rc = ibv_query_device_ex(e->ctx, NULL, &ax);
    CHECK(!rc, "ibv_query_device_ex: %s", strerror(rc));
    if (!(ax.odp_caps.general_caps & IBV_ODP_SUPPORT) ||
        !(ax.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_WRITE)) {
        *note = " (skipped: no RC WRITE on-demand paging)";
        return 0;
    }
    TRY(connected_pair(e, &p, NULL));
    TRY(region_new(e->pd, &r, 4096, REMOTE_ALL));

    odp = malloc(len); /* not touched: no page of it is present */
    CHECK(odp, "malloc");
    mr = ibv_reg_mr(e->pd, odp, len,
                    IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE |
                        IBV_ACCESS_REMOTE_WRITE);
    CHECK(mr, "ibv_reg_mr(ON_DEMAND): %s", strerror(errno));

    page = (uint8_t *)(((uintptr_t)odp + 4095) & ~(uintptr_t)4095);
    sge = (struct ibv_sge){ addr_of(page), 4096, mr->lkey };
    rc = ibv_advise_mr(e->pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                       IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1);
    CHECK(!rc, "ibv_advise_mr(PREFETCH_WRITE, FLUSH): %s", strerror(rc));

    fill(r.buf, 64, 100);
    TRY(rdma_write(p.a, p.cq_a, r.buf, 64, r.mr->lkey, addr_of(page + 8),
                   mr->rkey, 90, &wc));
    TRY(wc_ok(&wc, 90, IBV_WC_RDMA_WRITE));
    CHECK(!memcmp(page + 8, r.buf, 64),
          "a WRITE into the prefetched page did not land");
    TRY(rdma_write(p.a, p.cq_a, r.buf, 64, r.mr->lkey, addr_of(odp + len - 64),
                   mr->rkey, 91, &wc));
    TRY(wc_ok(&wc, 91, IBV_WC_RDMA_WRITE));
    CHECK(!memcmp(odp + len - 64, r.buf, 64),
          "a WRITE into a page not present did not land");

    /* An implicit on-demand region: the whole address space. */
    if (ax.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT) {
        ibuf = malloc(8192);
        CHECK(ibuf, "malloc");
        imr = ibv_reg_mr(e->pd, NULL, SIZE_MAX,
                         IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE |
                             IBV_ACCESS_REMOTE_WRITE);
        CHECK(imr, "ibv_reg_mr(NULL, SIZE_MAX, ON_DEMAND): %s",
              strerror(errno));
        fill(r.buf, 64, 101);
        TRY(rdma_write(p.a, p.cq_a, r.buf, 64, r.mr->lkey, addr_of(ibuf + 4000),
                       imr->rkey, 92, &wc));
        TRY(wc_ok(&wc, 92, IBV_WC_RDMA_WRITE));
        CHECK(!memcmp(ibuf + 4000, r.buf, 64),
              "a WRITE through the implicit region did not land");
        rc = ibv_dereg_mr(imr);
        imr = NULL;
        CHECK(!rc, "ibv_dereg_mr(implicit): %s", strerror(rc));
    }
    rc = ibv_dereg_mr(mr);
    mr = NULL;
    CHECK(!rc, "ibv_dereg_mr(ON_DEMAND): %s", strerror(rc));
    CHECK(!pair_destroy(&p), "destroying the pair failed");
    ret = 0;
out:
    if (imr) {
        ibv_dereg_mr(imr);
    }
    if (mr) {
        ibv_dereg_mr(mr);
    }
    pair_destroy(&p);
    region_free(&r);
    free(ibuf);
    free(odp);
    return ret;
}

/* A WRITE from @p's a that must fail with REM_ACCESS_ERR; @p is then used. */
static int write_refused(struct env *e, struct pair *p, struct region *src,
                         uint64_t raddr, uint32_t rkey, uint64_t wr_id,
                         const char *what)
{
    struct ibv_wc wc;

    if (rdma_write(p->a, p->cq_a, src->buf, 16, src->mr->lkey, raddr, rkey,
                   wr_id, &wc)) {
        return -1;
    }
    if (wc.status != IBV_WC_REM_ACCESS_ERR) {
        return FAIL("%s: status %s, expected remote access error", what,
                    wc_str(wc.status));
    }
    drain_async(e->ctx, 50);
    return 0;
}

int check_memory_windows(struct env *e, const char **note)
{
    struct ibv_mw *mw1 = NULL, *mw2 = NULL;
    struct pair p1 = { 0 }, p2 = { 0 }, p3 = { 0 };
    struct region r = { 0 }, src = { 0 };
    struct ibv_send_wr wr, *bad;
    struct ibv_mw_bind mb;
    struct ibv_wc wc;
    uint32_t old, k, k2;
    uint8_t *win;
    int rc, ret = -1;

    if (!(e->attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW)) {
        *note = " (skipped: no IBV_DEVICE_MEM_WINDOW)";
        return 0;
    }
    TRY(region_new(e->pd, &r, 4096,
                   IBV_ACCESS_MW_BIND | IBV_ACCESS_LOCAL_WRITE |
                       IBV_ACCESS_REMOTE_WRITE));
    TRY(region_new(e->pd, &src, 4096, IBV_ACCESS_LOCAL_WRITE));
    win = r.buf + 1024;
    TRY(connected_pair(e, &p1, NULL));
    TRY(connected_pair(e, &p2, NULL));

    /* Type 1: ibv_bind_mw. */
    mw1 = ibv_alloc_mw(e->pd, IBV_MW_TYPE_1);
    CHECK(mw1, "ibv_alloc_mw(TYPE_1): %s", strerror(errno));
    CHECK(mw1->type == IBV_MW_TYPE_1 && mw1->pd == e->pd,
          "the window's type or PD is wrong");
    old = mw1->rkey;
    memset(&mb, 0, sizeof(mb));
    mb.wr_id = 110;
    mb.send_flags = IBV_SEND_SIGNALED;
    mb.bind_info.mr = r.mr;
    mb.bind_info.addr = addr_of(win);
    mb.bind_info.length = 256;
    mb.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    rc = ibv_bind_mw(p1.b, mw1, &mb);
    CHECK(!rc, "ibv_bind_mw: %s", strerror(rc));
    TRY(wait_wc(p1.cq_b, &wc, 1, TIMEOUT_MS));
    TRY(wc_ok(&wc, 110, IBV_WC_BIND_MW));
    CHECK(mw1->rkey != old, "ibv_bind_mw left the window's rkey 0x%x", old);

    fill(src.buf, 32, 110);
    TRY(rdma_write(p1.a, p1.cq_a, src.buf, 32, src.mr->lkey, addr_of(win + 64),
                   mw1->rkey, 111, &wc));
    TRY(wc_ok(&wc, 111, IBV_WC_RDMA_WRITE));
    CHECK(!memcmp(win + 64, src.buf, 32),
          "a WRITE through the type 1 window did not land");
    TRY(write_refused(e, &p2, &src, addr_of(win + 248), mw1->rkey, 112,
                      "a WRITE across the type 1 window's end"));
    CHECK(((volatile uint8_t *)win)[256] == 0, /* device-written */
          "the refused WRITE wrote past the window");

    /* Type 2: BIND_MW and LOCAL_INV work requests. */
    if (!(e->attr.device_cap_flags &
          (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B))) {
        *note = " (type 2 skipped: no IBV_DEVICE_MEM_WINDOW_TYPE_2A/B)";
        goto done;
    }
    mw2 = ibv_alloc_mw(e->pd, IBV_MW_TYPE_2);
    CHECK(mw2, "ibv_alloc_mw(TYPE_2): %s", strerror(errno));
    k = ibv_inc_rkey(mw2->rkey);
    wr = (struct ibv_send_wr){
        .wr_id = 120, .opcode = IBV_WR_BIND_MW,
        .send_flags = IBV_SEND_SIGNALED,
        .bind_mw = {
            .mw = mw2, .rkey = k,
            .bind_info = {
                .mr = r.mr, .addr = addr_of(win),
                .length = 256,
                .mw_access_flags = IBV_ACCESS_REMOTE_WRITE,
            },
        },
    };
    TRY(post_and_wait(p1.b, &wr, p1.cq_b, &wc, 1));
    TRY(wc_ok(&wc, 120, IBV_WC_BIND_MW));
    fill(src.buf, 32, 120);
    TRY(rdma_write(p1.a, p1.cq_a, src.buf, 32, src.mr->lkey, addr_of(win + 128),
                   k, 121, &wc));
    TRY(wc_ok(&wc, 121, IBV_WC_RDMA_WRITE));
    CHECK(!memcmp(win + 128, src.buf, 32),
          "a WRITE through the type 2 window did not land");

    wr = (struct ibv_send_wr){
        .wr_id = 122,
        .opcode = IBV_WR_LOCAL_INV,
        .send_flags = IBV_SEND_SIGNALED,
        .invalidate_rkey = k,
    };
    TRY(post_and_wait(p1.b, &wr, p1.cq_b, &wc, 1));
    TRY(wc_ok(&wc, 122, IBV_WC_LOCAL_INV));
    TRY(write_refused(e, &p1, &src, addr_of(win + 128), k, 123,
                      "a WRITE through the invalidated type 2 window"));

    /* Bound again, with the next key, and invalidated by SEND_WITH_INV. */
    TRY(connected_pair(e, &p3, NULL));
    k2 = ibv_inc_rkey(k);
    wr = (struct ibv_send_wr){
        .wr_id = 124, .opcode = IBV_WR_BIND_MW,
        .send_flags = IBV_SEND_SIGNALED,
        .bind_mw = {
            .mw = mw2, .rkey = k2,
            .bind_info = {
                .mr = r.mr, .addr = addr_of(win),
                .length = 256,
                .mw_access_flags = IBV_ACCESS_REMOTE_WRITE,
            },
        },
    };
    TRY(post_and_wait(p3.b, &wr, p3.cq_b, &wc, 1));
    TRY(wc_ok(&wc, 124, IBV_WC_BIND_MW));
    TRY(post_recv(p3.b, 125, src.buf + 2048, 64, src.mr->lkey));
    {
        struct ibv_sge sge = { addr_of(src.buf), 16, src.mr->lkey };

        wr = (struct ibv_send_wr){
            .wr_id = 126,
            .sg_list = &sge,
            .num_sge = 1,
            .opcode = IBV_WR_SEND_WITH_INV,
            .send_flags = IBV_SEND_SIGNALED,
            .invalidate_rkey = k2,
        };
        bad = NULL;
        rc = ibv_post_send(p3.a, &wr, &bad);
        CHECK(!rc, "ibv_post_send(SEND_WITH_INV): %s", strerror(rc));
    }
    TRY(wait_wc(p3.cq_a, &wc, 1, TIMEOUT_MS));
    TRY(wc_ok(&wc, 126, IBV_WC_SEND));
    TRY(wait_wc(p3.cq_b, &wc, 1, TIMEOUT_MS));
    TRY(wc_ok(&wc, 125, IBV_WC_RECV));
    CHECK(wc.wc_flags & IBV_WC_WITH_INV,
          "SEND_WITH_INV's receive has no "
          "IBV_WC_WITH_INV (wc_flags 0x%x)",
          wc.wc_flags);
    CHECK(wc.invalidated_rkey == k2, "invalidated_rkey 0x%x, sent 0x%x",
          wc.invalidated_rkey, k2);
    TRY(write_refused(e, &p3, &src, addr_of(win + 128), k2, 127,
                      "a WRITE through the window SEND_WITH_INV "
                      "invalidated"));

    rc = ibv_dealloc_mw(mw2);
    mw2 = NULL;
    CHECK(!rc, "ibv_dealloc_mw(TYPE_2): %s", strerror(rc));
done:
    rc = ibv_dealloc_mw(mw1);
    mw1 = NULL;
    CHECK(!rc, "ibv_dealloc_mw(TYPE_1): %s", strerror(rc));
    drain_async(e->ctx, 50);
    CHECK(!pair_destroy(&p1) && !pair_destroy(&p2) && !pair_destroy(&p3),
          "destroying the pairs failed");
    CHECK(!region_free(&r), "ibv_dereg_mr failed");
    ret = 0;
out:
    if (mw2) {
        ibv_dealloc_mw(mw2);
    }
    if (mw1) {
        ibv_dealloc_mw(mw1);
    }
    pair_destroy(&p3);
    pair_destroy(&p2);
    pair_destroy(&p1);
    region_free(&src);
    region_free(&r);
    return ret;
}
