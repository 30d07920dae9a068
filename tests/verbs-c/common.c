// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * qhca-verbs-check: the helpers every check shares (see main.c for the
 * program). Recording why a check fails (failf, behind FAIL, CHECK and TRY),
 * making and destroying the objects the checks use (registered regions, QPs,
 * a connected RC pair), posting requests and waiting for or checking their
 * completions, and reading asynchronous events.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "verbs_check.h"

/* ------------------------------------------------------------------------ */
/* Reporting */

char why[640];

/* Records why the current check fails; returns -1. */
__attribute__((format(printf, 2, 3))) int failf(int line, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof(why)) {
        snprintf(why + n, sizeof(why) - n, " [line %d]", line);
    }
    return -1;
}

int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *wc_str(enum ibv_wc_status s)
{
    return ibv_wc_status_str(s);
}

/* ------------------------------------------------------------------------ */
/* The context every check shares, and the objects they make */

int region_new(struct ibv_pd *pd, struct region *r, size_t len, int access)
{
    void *p;
    int err;

    memset(r, 0, sizeof(*r));
    if (posix_memalign(&p, 4096, len)) {
        return FAIL("posix_memalign(%zu) failed", len);
    }
    memset(p, 0, len);
    /*
     * The function, not verbs.h's macro: with @access not a constant here
     * the macro would call ibv_reg_mr_iova2 instead.
     */
    r->mr = (ibv_reg_mr)(pd, p, len, access);
    if (!r->mr) {
        err = errno;
        free(p);
        return FAIL("ibv_reg_mr(%zu bytes, access 0x%x): %s", len, access,
                    strerror(err));
    }
    r->buf = p;
    r->len = len;
    return 0;
}

/* Deregisters and frees @r (if made); returns ibv_dereg_mr's result. */
int region_free(struct region *r)
{
    int ret = 0;

    if (r->mr) {
        ret = ibv_dereg_mr(r->mr);
        if (ret) {
            return ret; /* still registered: leak the memory */
        }
        r->mr = NULL;
    }
    free(r->buf);
    r->buf = NULL;
    return 0;
}

struct ibv_qp *qp_new(struct ibv_pd *pd, struct ibv_cq *cq,
                      enum ibv_qp_type type, int sig_all,
                      struct ibv_qp_cap *cap)
{
    return qp_new_on(pd, cq, NULL, type, sig_all, cap);
}

struct ibv_qp *qp_new_on(struct ibv_pd *pd, struct ibv_cq *cq,
                         struct ibv_srq *srq, enum ibv_qp_type type,
                         int sig_all, struct ibv_qp_cap *cap)
{
    struct ibv_qp_init_attr init;
    struct ibv_qp *qp;

    memset(&init, 0, sizeof(init));
    init.send_cq = cq;
    init.recv_cq = cq;
    init.srq = srq;
    init.qp_type = type;
    init.sq_sig_all = sig_all;
    init.cap.max_send_wr = 64;
    init.cap.max_recv_wr = srq ? 0 : 64;
    init.cap.max_send_sge = 4;
    init.cap.max_recv_sge = srq ? 0 : 4;
    init.cap.max_inline_data = type == IBV_QPT_RC ? 64 : 0;
    qp = ibv_create_qp(pd, &init);
    if (!qp) {
        FAIL("ibv_create_qp(type %d%s): %s", type, srq ? ", on an SRQ" : "",
             strerror(errno));
        return NULL;
    }
    if (cap) {
        *cap = init.cap;
    }
    return qp;
}

/*
 * RESET -> INIT -> RTR -> RTS of an RC QP connected to @dest_qpn of the same
 * port, addressed by the port's GID 0 (RoCE: every address vector has a GRH).
 */
int rc_connect(struct ibv_qp *qp, uint32_t dest_qpn, uint32_t sq_psn,
               uint32_t rq_psn)
{
    struct rc_path local = {
        .mtu = IBV_MTU_1024,
        .timeout = 14,
        .rd_atomic = 1,
        .dest_rd_atomic = 1,
    };
    union ibv_gid gid;

    if (ibv_query_gid(qp->context, PORT, 0, &gid)) {
        return FAIL("ibv_query_gid(%d, 0) failed", PORT);
    }
    local.dgid = &gid;
    local.sgid_index = 0;
    return rc_connect_path(qp, dest_qpn, sq_psn, rq_psn, &local);
}

/* The same, on @path: addressed by GID if @path has one. */
int rc_connect_path(struct ibv_qp *qp, uint32_t dest_qpn, uint32_t sq_psn,
                    uint32_t rq_psn, const struct rc_path *path)
{
    struct ibv_qp_attr a;
    int ret;

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = PORT;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                        IBV_ACCESS_REMOTE_ATOMIC;
    ret = ibv_modify_qp(qp, &a,
                        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                            IBV_QP_ACCESS_FLAGS);
    if (ret) {
        return FAIL("ibv_modify_qp(INIT): %s", strerror(ret));
    }

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = path->mtu;
    a.dest_qp_num = dest_qpn;
    a.rq_psn = rq_psn;
    a.max_dest_rd_atomic = path->dest_rd_atomic;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = PORT;
    if (path->dgid) {
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = *path->dgid;
        a.ah_attr.grh.sgid_index = path->sgid_index;
        a.ah_attr.grh.hop_limit = 64;
    }
    ret = ibv_modify_qp(qp, &a,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                            IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                            IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (ret) {
        return FAIL("ibv_modify_qp(RTR): %s", strerror(ret));
    }

    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = path->timeout;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = sq_psn;
    a.max_rd_atomic = path->rd_atomic;
    ret = ibv_modify_qp(qp, &a,
                        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                            IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                            IBV_QP_MAX_QP_RD_ATOMIC);
    if (ret) {
        return FAIL("ibv_modify_qp(RTS): %s", strerror(ret));
    }
    return 0;
}

/*
 * Destroys what @p has (QPs first, then their CQs); returns 0, or the first
 * non-zero result of a destroy verb (the object is then kept).
 */
int pair_destroy(struct pair *p)
{
    int ret, first = 0;

    if (p->a) {
        ret = ibv_destroy_qp(p->a);
        if (!ret) {
            p->a = NULL;
        }
        first = first ? first : ret;
    }
    if (p->b) {
        ret = ibv_destroy_qp(p->b);
        if (!ret) {
            p->b = NULL;
        }
        first = first ? first : ret;
    }
    if (p->cq_a && !p->a) {
        ret = ibv_destroy_cq(p->cq_a);
        if (!ret) {
            p->cq_a = NULL;
        }
        first = first ? first : ret;
    }
    if (p->cq_b && !p->b) {
        ret = ibv_destroy_cq(p->cq_b);
        if (!ret) {
            p->cq_b = NULL;
        }
        first = first ? first : ret;
    }
    return first;
}

/* Two RC QPs of @e's PD in RTS, connected to each other. */
int connected_pair(struct env *e, struct pair *p, const struct pair_opts *o)
{
    static const struct pair_opts none;

    if (!o) {
        o = &none;
    }
    memset(p, 0, sizeof(*p));
    p->cq_a = ibv_create_cq(e->ctx, 256, o->cq_context, o->channel, 0);
    if (!p->cq_a) {
        return FAIL("ibv_create_cq: %s", strerror(errno));
    }
    p->cq_b = ibv_create_cq(e->ctx, 256, NULL, NULL, 0);
    if (!p->cq_b) {
        goto fail_errno;
    }
    p->a = qp_new(e->pd, p->cq_a, IBV_QPT_RC, o->sig_all, &p->cap);
    if (!p->a) {
        goto fail;
    }
    p->b = qp_new(e->pd, p->cq_b, IBV_QPT_RC, 0, NULL);
    if (!p->b) {
        goto fail;
    }
    if (rc_connect(p->a, p->b->qp_num, 0x100, 0x200) ||
        rc_connect(p->b, p->a->qp_num, 0x200, 0x100)) {
        goto fail;
    }
    return 0;

fail_errno:
    FAIL("ibv_create_cq: %s", strerror(errno));
fail:
    pair_destroy(p);
    return -1;
}

/* ------------------------------------------------------------------------ */
/* Posting and completions */

/*
 * Polls @cq until @n completions are in @wc, or fails after @ms
 * milliseconds.
 */
int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, int n, int ms)
{
    int64_t end = now_ms() + ms;
    int got = 0, r;

    while (got < n) {
        r = ibv_poll_cq(cq, n - got, wc + got);
        if (r < 0) {
            return FAIL("ibv_poll_cq returned %d", r);
        }
        got += r;
        if (got < n && now_ms() > end) {
            return FAIL("%d of %d completions within %d ms", got, n, ms);
        }
    }
    return 0;
}

/* Fails if any completion arrives on @cq within @ms milliseconds. */
int expect_quiet(struct ibv_cq *cq, int ms, const char *what)
{
    int64_t end = now_ms() + ms;
    struct ibv_wc wc;
    int r;

    do {
        r = ibv_poll_cq(cq, 1, &wc);
        if (r < 0) {
            return FAIL("ibv_poll_cq returned %d", r);
        }
        if (r > 0) {
            return FAIL("%s: unexpected completion wr_id %" PRIu64
                        " status %s opcode %d",
                        what, wc.wr_id, wc_str(wc.status), wc.opcode);
        }
    } while (now_ms() < end);
    return 0;
}

/* Posts @wr on @qp and waits for @n completions on @cq into @wc. */
int post_and_wait(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_cq *cq,
                  struct ibv_wc *wc, int n)
{
    struct ibv_send_wr *bad = NULL;
    int ret;

    ret = ibv_post_send(qp, wr, &bad);
    if (ret) {
        return FAIL("ibv_post_send(opcode %d): %s", wr->opcode, strerror(ret));
    }
    return wait_wc(cq, wc, n, TIMEOUT_MS);
}

int post_recv(struct ibv_qp *qp, uint64_t wr_id, void *buf, uint32_t len,
              uint32_t lkey)
{
    struct ibv_sge sge = {
        .addr = addr_of(buf),
        .length = len,
        .lkey = lkey,
    };
    struct ibv_recv_wr wr = {
        .wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
    }, *bad = NULL;
    int ret;

    ret = ibv_post_recv(qp, &wr, &bad);
    if (ret) {
        return FAIL("ibv_post_recv: %s", strerror(ret));
    }
    return 0;
}

/* @wc is the completion of @wr_id, successful and of @opcode. */
int wc_ok(const struct ibv_wc *wc, uint64_t wr_id, enum ibv_wc_opcode opcode)
{
    if (wc->status != IBV_WC_SUCCESS) {
        return FAIL("wr_id %" PRIu64 ": status %s (vendor_err 0x%x)", wc->wr_id,
                    wc_str(wc->status), wc->vendor_err);
    }
    if (wc->wr_id != wr_id) {
        return FAIL("completion of wr_id %" PRIu64 ", expected %" PRIu64,
                    wc->wr_id, wr_id);
    }
    if (wc->opcode != opcode) {
        return FAIL("wr_id %" PRIu64 ": opcode %d, expected %d", wr_id,
                    wc->opcode, opcode);
    }
    return 0;
}

/* @wc is the completion of @wr_id with status @status. */
int wc_err(const struct ibv_wc *wc, uint64_t wr_id, enum ibv_wc_status status)
{
    if (wc->wr_id != wr_id) {
        return FAIL("completion of wr_id %" PRIu64 ", expected %" PRIu64,
                    wc->wr_id, wr_id);
    }
    if (wc->status != status) {
        return FAIL("wr_id %" PRIu64 ": status %s, expected %s", wr_id,
                    wc_str(wc->status), wc_str(status));
    }
    return 0;
}

/*
 * One signaled RDMA WRITE of @len bytes at @src (@lkey) to @raddr / @rkey
 * from @qp; its completion, whatever its status, in @wc.
 */
int rdma_write(struct ibv_qp *qp, struct ibv_cq *cq, const void *src,
               uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
               uint64_t wr_id, struct ibv_wc *wc)
{
    struct ibv_sge sge = {
        .addr = addr_of(src),
        .length = len,
        .lkey = lkey,
    };
    struct ibv_send_wr wr = {
        .wr_id = wr_id,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_WRITE,
        .send_flags = IBV_SEND_SIGNALED,
        .wr.rdma = { .remote_addr = raddr, .rkey = rkey },
    };

    return post_and_wait(qp, &wr, cq, wc, 1);
}

void fill(uint8_t *p, size_t len, uint8_t seed)
{
    size_t i;

    for (i = 0; i < len; i++) {
        p[i] = (uint8_t)(seed + i * 7);
    }
}

/* ------------------------------------------------------------------------ */
/* Asynchronous events */

/*
 * Waits up to @ms for an asynchronous event (poll(2) on async_fd) and reads
 * it; returns 1 with @ev filled (not acknowledged), 0 if none came, -1 on an
 * error.
 */
int next_async(struct ibv_context *ctx, struct ibv_async_event *ev, int ms)
{
    struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };
    int r;

    r = poll(&pfd, 1, ms);
    if (r < 0) {
        return FAIL("poll(async_fd): %s", strerror(errno));
    }
    if (r == 0) {
        return 0;
    }
    if (!(pfd.revents & POLLIN)) {
        return FAIL("poll(async_fd): revents 0x%x", pfd.revents);
    }
    if (ibv_get_async_event(ctx, ev)) {
        return FAIL("ibv_get_async_event after POLLIN: %s", strerror(errno));
    }
    return 1;
}

/* Reads and acknowledges the events that come within @ms; returns how many. */
int drain_async(struct ibv_context *ctx, int ms)
{
    struct ibv_async_event ev;
    int n = 0;

    while (next_async(ctx, &ev, ms) == 1) {
        ibv_ack_async_event(&ev);
        n++;
    }
    return n;
}
