// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * qhca-verbs-check: shared receive queues through libibverbs, as any
 * program uses them: two RC QPs receiving from one SRQ, their receives
 * completing with the SRQ's WQEs in the order the messages came, each on
 * its QP; the limit armed with ibv_modify_srq and its async event; the
 * attributes ibv_query_srq reports; what the verbs refuse (a limit above
 * max_wr, resizing, destroying an SRQ a QP uses, a receive posted to such
 * a QP); and IBV_EVENT_QP_LAST_WQE_REACHED when one of them goes to ERR.
 */

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "verbs_check.h"

#define SRQ_WR 16
#define MSG    64

/* The next async event is @type for @what (an SRQ or a QP pointer). */
static int expect_async(struct env *e, enum ibv_event_type type,
                        const void *what)
{
    struct ibv_async_event ev;
    const void *got;
    int r;

    r = next_async(e->ctx, &ev, TIMEOUT_MS);
    if (r <= 0) {
        return r < 0 ? r : FAIL("no async event %s", ibv_event_type_str(type));
    }
    got = type == IBV_EVENT_SRQ_LIMIT_REACHED ? (const void *)ev.element.srq
                                              : (const void *)ev.element.qp;
    ibv_ack_async_event(&ev);
    if (ev.event_type != type || got != what) {
        return FAIL("async event %s for %p, expected %s for %p",
                    ibv_event_type_str(ev.event_type), got,
                    ibv_event_type_str(type), what);
    }
    return 0;
}

int check_srq(struct env *e)
{
    struct ibv_srq_init_attr sa;
    struct ibv_srq_attr attr;
    struct ibv_recv_wr rwr[4], *bad_r;
    struct ibv_send_wr swr, *bad_s;
    struct ibv_sge rsge[4], ssge;
    struct ibv_qp *a[2] = { 0 }, *b[2] = { 0 };
    struct ibv_cq *cq = NULL;
    struct ibv_srq *srq = NULL;
    struct region r = { 0 };
    struct ibv_wc wc[2];
    int i, rc, ret = -1;

    CHECK(e->attr.max_srq > 0 && e->attr.max_srq_wr >= SRQ_WR &&
              e->attr.max_srq_sge > 0,
          "device attributes: max_srq %d max_srq_wr %d max_srq_sge %d",
          e->attr.max_srq, e->attr.max_srq_wr, e->attr.max_srq_sge);
    TRY(region_new(e->pd, &r, 8192, REMOTE_ALL));
    cq = ibv_create_cq(e->ctx, 64, NULL, NULL, 0);
    CHECK(cq, "ibv_create_cq: %s", strerror(errno));
    drain_async(e->ctx, 0);

    memset(&sa, 0, sizeof(sa));
    sa.attr.max_wr = SRQ_WR;
    sa.attr.max_sge = 2;
    srq = ibv_create_srq(e->pd, &sa);
    CHECK(srq, "ibv_create_srq: %s", strerror(errno));
    CHECK(sa.attr.max_wr >= SRQ_WR && sa.attr.max_sge >= 2,
          "ibv_create_srq gave max_wr %u max_sge %u", sa.attr.max_wr,
          sa.attr.max_sge);
    memset(&attr, 0xff, sizeof(attr));
    rc = ibv_query_srq(srq, &attr);
    CHECK(!rc && attr.max_wr == sa.attr.max_wr && attr.srq_limit == 0,
          "ibv_query_srq: %d, max_wr %u limit %u", rc, attr.max_wr,
          attr.srq_limit);

    /* a[i] sends to b[i]; both b's receive from the SRQ. */
    for (i = 0; i < 2; i++) {
        a[i] = qp_new(e->pd, cq, IBV_QPT_RC, 1, NULL);
        b[i] = a[i] ? qp_new_on(e->pd, cq, srq, IBV_QPT_RC, 0, NULL) : NULL;
        if (!b[i]) {
            goto out; /* qp_new or qp_new_on said why */
        }
    }
    for (i = 0; i < 2; i++) {
        TRY(rc_connect(a[i], b[i]->qp_num, 100, 200));
        TRY(rc_connect(b[i], a[i]->qp_num, 200, 100));
    }
    errno = 0;
    CHECK(post_recv(b[0], 9, r.buf, MSG, r.mr->lkey) < 0,
          "ibv_post_recv to a QP of an SRQ succeeded");
    why[0] = 0;

    /* Four receives in one list. */
    for (i = 0; i < 4; i++) {
        rsge[i] = (struct ibv_sge){ .addr = addr_of(r.buf + 4096 + i * MSG),
                                    .length = MSG,
                                    .lkey = r.mr->lkey };
        rwr[i] = (struct ibv_recv_wr){ .wr_id = 40 + i,
                                       .next = i < 3 ? &rwr[i + 1] : NULL,
                                       .sg_list = &rsge[i],
                                       .num_sge = 1 };
    }
    rc = ibv_post_srq_recv(srq, rwr, &bad_r);
    CHECK(!rc, "ibv_post_srq_recv: %d (%s)", rc, strerror(rc));
    memset(&attr, 0, sizeof(attr));
    attr.srq_limit = SRQ_WR + 1;
    rc = ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT);
    CHECK(rc == EINVAL, "ibv_modify_srq(limit > max_wr): %d, expected EINVAL",
          rc);
    attr.max_wr = 2 * SRQ_WR;
    rc = ibv_modify_srq(srq, &attr, IBV_SRQ_MAX_WR);
    CHECK(rc == EINVAL, "ibv_modify_srq(IBV_SRQ_MAX_WR): %d, expected EINVAL",
          rc);
    attr.srq_limit = 3;
    rc = ibv_modify_srq(srq, &attr, IBV_SRQ_LIMIT);
    CHECK(!rc, "ibv_modify_srq(limit 3): %d (%s)", rc, strerror(rc));

    /* Messages from a[0], a[1], a[0]: the SRQ's WQEs in that order. */
    for (i = 0; i < 3; i++) {
        struct ibv_qp *to = b[i % 2];

        fill(r.buf + i * MSG, 48, (uint8_t)(i + 1));
        ssge = (struct ibv_sge){ .addr = addr_of(r.buf + i * MSG),
                                 .length = 48,
                                 .lkey = r.mr->lkey };
        memset(&swr, 0, sizeof(swr));
        swr.wr_id = i;
        swr.opcode = IBV_WR_SEND;
        swr.sg_list = &ssge;
        swr.num_sge = 1;
        rc = ibv_post_send(a[i % 2], &swr, &bad_s);
        CHECK(!rc, "ibv_post_send: %d", rc);
        TRY(wait_wc(cq, wc, 2, TIMEOUT_MS));
        if (wc[0].opcode != IBV_WC_RECV) {
            struct ibv_wc t = wc[0];

            wc[0] = wc[1];
            wc[1] = t;
        }
        TRY(wc_ok(&wc[0], 40 + i, IBV_WC_RECV));
        TRY(wc_ok(&wc[1], i, IBV_WC_SEND));
        CHECK(wc[0].qp_num == to->qp_num && wc[0].byte_len == 48,
              "message %d: received on QP %u, %u bytes; expected QP %u, 48", i,
              wc[0].qp_num, wc[0].byte_len, to->qp_num);
        CHECK(!memcmp(r.buf + 4096 + i * MSG, r.buf + i * MSG, 48),
              "message %d: the data", i);
        if (i == 1) {
            /* Two left of four: below the limit of 3. */
            TRY(expect_async(e, IBV_EVENT_SRQ_LIMIT_REACHED, srq));
        }
    }
    CHECK(!drain_async(e->ctx, QUIET_MS), "more async events after the limit");
    rc = ibv_query_srq(srq, &attr);
    CHECK(!rc && attr.srq_limit == 0, "ibv_query_srq after the event: "
                                      "%d, limit %u (expected disarmed)",
          rc, attr.srq_limit);

    rc = ibv_destroy_srq(srq);
    CHECK(rc == EBUSY, "ibv_destroy_srq with QPs on it: %d, expected EBUSY",
          rc);

    /* A QP of the SRQ in ERR: its last WQE is reached (it holds none). */
    {
        struct ibv_qp_attr qa = { .qp_state = IBV_QPS_ERR };

        rc = ibv_modify_qp(b[1], &qa, IBV_QP_STATE);
        CHECK(!rc, "ibv_modify_qp(ERR): %d", rc);
    }
    TRY(expect_async(e, IBV_EVENT_QP_LAST_WQE_REACHED, b[1]));
    TRY(expect_quiet(cq, QUIET_MS, "after the QP went to ERR"));

    ret = 0;
out:
    for (i = 0; i < 2; i++) {
        if (a[i]) {
            ibv_destroy_qp(a[i]);
        }
        if (b[i]) {
            ibv_destroy_qp(b[i]);
        }
    }
    if (srq && ibv_destroy_srq(srq) && !ret) {
        ret = FAIL("ibv_destroy_srq once its QPs are gone failed");
    }
    drain_async(e->ctx, 0);
    if (cq) {
        ibv_destroy_cq(cq);
    }
    region_free(&r);
    return ret;
}
