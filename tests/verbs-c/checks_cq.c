// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * qhca-verbs-check: CQ checks.  ibv_resize_cq to a smaller and a larger
 * ring with completions not polled yet (none lost, none reordered, the
 * rings wrapped many times after), refused while the new size cannot hold
 * what is pending (and nothing lost then either), an armed CQ still
 * delivering its event after a resize.
 */

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "verbs_check.h"

/*
 * Posts @n signalled 8-byte RDMA WRITEs on @p's QP a, wr_id @first.., each
 * to its own slot of @r's second half, and returns once the last one landed
 * and a quiet period passed: their completions are then in cq_a, not polled.
 */
static int writes_done(struct pair *p, struct region *r, uint64_t first,
                       int n)
{
    volatile uint64_t *dst = (volatile uint64_t *)(r->buf + r->len / 2);
    int64_t end;
    int i, rc;

    for (i = 0; i < n; i++) {
        uint64_t id = first + i;
        struct ibv_sge sge = { addr_of(r->buf + 8 * (id % 64)), 8,
                               r->mr->lkey };
        struct ibv_send_wr wr = {
            .wr_id = id, .sg_list = &sge, .num_sge = 1,
            .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED,
            .wr.rdma = { addr_of((const void *)&dst[id % 64]), r->mr->rkey },
        }, *bad = NULL;

        memcpy(r->buf + 8 * (id % 64), &id, 8);
        rc = ibv_post_send(p->a, &wr, &bad);
        if (rc) {
            return FAIL("ibv_post_send of WRITE %llu: %s",
                        (unsigned long long)id, strerror(rc));
        }
    }
    end = now_ms() + TIMEOUT_MS;
    while (dst[(first + n - 1) % 64] != first + n - 1) {
        if (now_ms() > end) {
            return FAIL("WRITE %llu did not land within %d ms",
                        (unsigned long long)(first + n - 1), TIMEOUT_MS);
        }
    }
    usleep(QUIET_MS * 1000);
    return 0;
}

/* Polls @n completions of cq_a: the WRITEs @first.. in order. */
static int take(struct pair *p, uint64_t first, int n)
{
    struct ibv_wc wc[64];
    int i;

    if (n > 64) {
        return FAIL("take: %d completions at once", n);
    }
    if (wait_wc(p->cq_a, wc, n, TIMEOUT_MS) < 0) {
        return -1;
    }
    for (i = 0; i < n; i++) {
        if (wc_ok(&wc[i], first + i, IBV_WC_RDMA_WRITE) < 0) {
            return -1;
        }
    }
    return 0;
}

int check_resize_cq(struct env *e)
{
    struct ibv_comp_channel *ch = NULL;
    struct pair_opts o = { 0 };
    struct pair p = { 0 };
    struct region r = { 0 };
    struct ibv_cq *ev_cq;
    struct pollfd pfd;
    uint64_t id = 100;
    void *ev_ctx;
    int i, rc, ret = -1;

    ch = ibv_create_comp_channel(e->ctx);
    CHECK(ch, "ibv_create_comp_channel: %s", strerror(errno));
    o.channel = ch;
    TRY(connected_pair(e, &p, &o));
    TRY(region_new(e->pd, &r, 8192, REMOTE_ALL));

    /* 20 completions, 5 polled: the other 15 into a ring of 16. */
    TRY(writes_done(&p, &r, id, 20));
    TRY(take(&p, id, 5));
    rc = ibv_resize_cq(p.cq_a, 16);
    CHECK(!rc, "ibv_resize_cq(16) with 15 pending: %s", strerror(rc));
    CHECK(p.cq_a->cqe == 16, "cqe %d after resizing to 16", p.cq_a->cqe);
    TRY(take(&p, id + 5, 15));
    TRY(expect_quiet(p.cq_a, QUIET_MS, "after the moved completions"));
    id += 20;
    /* Round after round through the 16-entry ring. */
    for (i = 0; i < 12; i++) {
        TRY(writes_done(&p, &r, id, 11));
        TRY(take(&p, id, 11));
        id += 11;
    }

    /* 12 pending do not fit 4: refused, nothing lost. */
    TRY(writes_done(&p, &r, id, 12));
    rc = ibv_resize_cq(p.cq_a, 4);
    CHECK(rc == EINVAL, "ibv_resize_cq(4) with 12 pending: %d (%s), "
          "expected EINVAL", rc, strerror(rc));
    CHECK(p.cq_a->cqe == 16, "cqe %d after a refused resize", p.cq_a->cqe);
    /* Then into a larger ring, and filled past the old size. */
    rc = ibv_resize_cq(p.cq_a, 1000);
    CHECK(!rc, "ibv_resize_cq(1000) with 12 pending: %s", strerror(rc));
    CHECK(p.cq_a->cqe >= 1000, "cqe %d after resizing to 1000", p.cq_a->cqe);
    TRY(writes_done(&p, &r, id + 12, 40));
    TRY(take(&p, id, 52));
    id += 52;

    /* Sizes no device takes. */
    for (i = 0; i < 3; i++) {
        static const int bad[] = { 0, -1, 1 << 20 };

        rc = ibv_resize_cq(p.cq_a, bad[i]);
        CHECK(rc == EINVAL, "ibv_resize_cq(%d): %d (%s), expected EINVAL",
              bad[i], rc, strerror(rc));
    }

    /* Armed before a resize: the next completion still wakes the channel. */
    rc = ibv_req_notify_cq(p.cq_a, 0);
    CHECK(!rc, "ibv_req_notify_cq: %s", strerror(rc));
    rc = ibv_resize_cq(p.cq_a, 64);
    CHECK(!rc, "ibv_resize_cq(64) while armed: %s", strerror(rc));
    TRY(writes_done(&p, &r, id, 1));
    pfd = (struct pollfd){ .fd = ch->fd, .events = POLLIN };
    rc = poll(&pfd, 1, TIMEOUT_MS);
    CHECK(rc == 1 && (pfd.revents & POLLIN),
          "no completion event within %d ms after a resize of an armed CQ",
          TIMEOUT_MS);
    CHECK(!ibv_get_cq_event(ch, &ev_cq, &ev_ctx) && ev_cq == p.cq_a,
          "ibv_get_cq_event: %s", strerror(errno));
    ibv_ack_cq_events(ev_cq, 1);
    TRY(take(&p, id, 1));

    CHECK(!pair_destroy(&p), "destroying the pair failed");
    rc = ibv_destroy_comp_channel(ch);
    CHECK(!rc, "ibv_destroy_comp_channel: %d", rc);
    ch = NULL;
    ret = 0;
out:
    pair_destroy(&p);
    region_free(&r);
    if (ch) {
        ibv_destroy_comp_channel(ch);
    }
    return ret;
}
