// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * qhca-verbs-check: registering a region again (see main.c for the
 * program). ibv_rereg_mr of its translation (a new buffer; the old rkey is
 * refused), of its access (remote write taken away, and given back), of its
 * PD (a QP of the old PD can no longer use it), of an on-demand region's
 * translation (if the device pages on demand), and of a region with a type 2
 * window bound to it, which must fail and leave the region working.
 */

#define _GNU_SOURCE

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "verbs_check.h"

#define RR_LEN 4096

/*
 * A WRITE of 32 bytes from @src (@lkey) to @dst through @rkey on a fresh
 * pair, which must complete with @status; on success the bytes must land.
 */
static int write_through(struct env *e, const uint8_t *src, uint32_t lkey,
                         uint8_t *dst, uint32_t rkey, uint64_t wr_id,
                         enum ibv_wc_status status, const char *what)
{
    struct pair p = { 0 };
    struct ibv_wc wc;
    int ret = -1;

    TRY(connected_pair(e, &p, NULL));
    TRY(rdma_write(p.a, p.cq_a, src, 32, lkey, addr_of(dst), rkey, wr_id,
                   &wc));
    if (wc.wr_id != wr_id || wc.status != status) {
        FAIL("%s: wr_id %llu, status %s, expected %s", what,
             (unsigned long long)wc.wr_id, wc_str(wc.status), wc_str(status));
        goto out;
    }
    if (status == IBV_WC_SUCCESS && memcmp(dst, src, 32)) {
        FAIL("%s: the WRITE did not land", what);
        goto out;
    }
    ret = 0;
out:
    if (status != IBV_WC_SUCCESS) {
        drain_async(e->ctx, 50);
    }
    if (pair_destroy(&p) && !ret) {
        ret = FAIL("%s: destroying the pair failed", what);
    }
    return ret;
}

/*
 * ibv_rereg_mr, which must succeed. The keys may change (on qhca a new
 * translation, or rights its pages were not pinned for, is a new
 * registration); the checks use mr's keys after it.
 */
static int rereg_ok(struct ibv_mr *mr, int flags, struct ibv_pd *pd,
                    void *addr, size_t len, int access, const char *what)
{
    int rc = ibv_rereg_mr(mr, flags, pd, addr, len, access);

    if (rc) {
        return FAIL("ibv_rereg_mr(%s): %d, %s", what, rc, strerror(errno));
    }
    return 0;
}

/* Translation, access and PD of a pinned region. */
static int rereg_pinned(struct env *e, struct region *src)
{
    struct region r = { 0 };
    struct ibv_pd *pd2 = NULL;
    uint8_t *old_buf = NULL, *buf2 = NULL;
    uint32_t old_rkey;
    void *p;
    int ret = -1;

    TRY(region_new(e->pd, &r, RR_LEN, REMOTE_ALL));

    /* Translation: a new buffer, through the new lkey and rkey. */
    CHECK(!posix_memalign(&p, 4096, RR_LEN), "posix_memalign failed");
    buf2 = p;
    memset(buf2, 0, RR_LEN);
    old_rkey = r.mr->rkey;
    TRY(rereg_ok(r.mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf2, RR_LEN, 0,
                 "CHANGE_TRANSLATION"));
    old_buf = r.buf;
    r.buf = buf2; /* region_free frees the region's buffer */
    buf2 = NULL;
    CHECK(r.mr->addr == r.buf && r.mr->length == RR_LEN,
          "after the rereg the region is at %p + %zu, not %p + %d", r.mr->addr,
          r.mr->length, (void *)r.buf, RR_LEN);
    fill(r.buf, 32, 200);
    TRY(write_through(e, r.buf, r.mr->lkey, r.buf + 2048, r.mr->rkey, 200,
                      IBV_WC_SUCCESS,
                      "a WRITE from and to the new buffer, new keys"));
    fill(src->buf, 32, 201);
    TRY(write_through(e, src->buf, src->mr->lkey, old_buf + 64, old_rkey, 201,
                      IBV_WC_REM_ACCESS_ERR,
                      "a WRITE through the old rkey"));
    CHECK(old_buf[64] == 0 && old_buf[65] == 0,
          "the refused WRITE reached the old buffer");

    /* Access: remote write taken away, then given back, keys kept. */
    old_rkey = r.mr->rkey;
    TRY(rereg_ok(r.mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
                 IBV_ACCESS_LOCAL_WRITE, "CHANGE_ACCESS to LOCAL_WRITE"));
    CHECK(r.mr->rkey == old_rkey && r.mr->lkey == old_rkey,
          "CHANGE_ACCESS alone changed the keys (%#x, %#x; were %#x)",
          r.mr->lkey, r.mr->rkey, old_rkey);
    fill(src->buf, 32, 202);
    TRY(write_through(e, src->buf, src->mr->lkey, r.buf + 256, r.mr->rkey, 202,
                      IBV_WC_REM_ACCESS_ERR,
                      "a WRITE into the region without remote write"));
    CHECK(r.buf[256] == 0 && r.buf[257] == 0,
          "the refused WRITE reached the region");
    TRY(rereg_ok(r.mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, REMOTE_ALL,
                 "CHANGE_ACCESS back to remote access"));
    fill(src->buf, 32, 203);
    TRY(write_through(e, src->buf, src->mr->lkey, r.buf + 512, r.mr->rkey, 203,
                      IBV_WC_SUCCESS,
                      "a WRITE with remote write given back"));

    /* PD: a QP of the old PD can no longer use it, locally or remotely. */
    pd2 = ibv_alloc_pd(e->ctx);
    CHECK(pd2, "ibv_alloc_pd: %s", strerror(errno));
    TRY(rereg_ok(r.mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0,
                 "CHANGE_PD"));
    CHECK(r.mr->pd == pd2, "after CHANGE_PD the region's PD is not the new one");
    CHECK(r.mr->rkey == old_rkey, "CHANGE_PD alone changed the keys");
    fill(src->buf, 32, 204);
    TRY(write_through(e, src->buf, src->mr->lkey, r.buf + 768, r.mr->rkey, 204,
                      IBV_WC_REM_ACCESS_ERR,
                      "a WRITE into the region of another PD"));
    fill(r.buf + 1024, 32, 205);
    TRY(write_through(e, r.buf + 1024, r.mr->lkey, src->buf + 1024,
                      src->mr->rkey, 205, IBV_WC_LOC_PROT_ERR,
                      "a WRITE from the region of another PD"));
    CHECK(ibv_dealloc_pd(pd2) == EBUSY,
          "ibv_dealloc_pd of the region's new PD did not say EBUSY");
    TRY(rereg_ok(r.mr, IBV_REREG_MR_CHANGE_PD, e->pd, NULL, 0, 0,
                 "CHANGE_PD back"));
    fill(src->buf, 32, 206);
    TRY(write_through(e, src->buf, src->mr->lkey, r.buf + 1536, r.mr->rkey, 206,
                      IBV_WC_SUCCESS, "a WRITE with the PD given back"));
    CHECK(!ibv_dealloc_pd(pd2), "ibv_dealloc_pd of the PD the region left: %s",
          strerror(errno));
    pd2 = NULL;
    CHECK(!region_free(&r), "ibv_dereg_mr of the reregistered region failed");

    /*
     * Write rights for pages that were not pinned writable: registered
     * again, and a WRITE lands through the keys it has now.
     */
    TRY(region_new(e->pd, &r, RR_LEN, IBV_ACCESS_REMOTE_READ));
    TRY(rereg_ok(r.mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, REMOTE_ALL,
                 "CHANGE_ACCESS of a read-only region to remote write"));
    fill(src->buf, 32, 207);
    TRY(write_through(e, src->buf, src->mr->lkey, r.buf + 64, r.mr->rkey, 207,
                      IBV_WC_SUCCESS,
                      "a WRITE into a region made writable by a rereg"));
    CHECK(!memcmp(r.buf + 64, src->buf, 32), "the WRITE did not land");
    ret = 0;
out:
    region_free(&r);
    if (pd2) {
        ibv_dealloc_pd(pd2);
    }
    free(buf2);
    free(old_buf);
    return ret;
}

/* An on-demand region's translation: the new range pages in on demand. */
static int rereg_odp(struct env *e, struct region *src, const char **note)
{
    const size_t len = 64 * 1024;
    struct ibv_device_attr_ex ax;
    struct ibv_mr *mr = NULL;
    uint8_t *a = NULL, *b = NULL;
    void *p;
    int rc, ret = -1;

    memset(&ax, 0, sizeof(ax));
    rc = ibv_query_device_ex(e->ctx, NULL, &ax);
    CHECK(!rc, "ibv_query_device_ex: %s", strerror(rc));
    if (!(ax.odp_caps.general_caps & IBV_ODP_SUPPORT) ||
        !(ax.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_WRITE)) {
        *note = " (on-demand skipped: no RC WRITE on-demand paging)";
        return 0;
    }
    CHECK(!posix_memalign(&p, 4096, len), "posix_memalign failed");
    a = p;
    CHECK(!posix_memalign(&p, 4096, len), "posix_memalign failed");
    b = p; /* not touched: no page of it is present */
    mr = ibv_reg_mr(e->pd, a, len,
                    IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE |
                        IBV_ACCESS_REMOTE_WRITE);
    CHECK(mr, "ibv_reg_mr(ON_DEMAND): %s", strerror(errno));
    TRY(rereg_ok(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b, len, 0,
                 "CHANGE_TRANSLATION of an on-demand region"));
    fill(src->buf, 32, 210);
    TRY(write_through(e, src->buf, src->mr->lkey, b + len - 64, mr->rkey, 210,
                      IBV_WC_SUCCESS,
                      "a WRITE into the on-demand region's new range"));
    rc = ibv_dereg_mr(mr);
    mr = NULL;
    CHECK(!rc, "ibv_dereg_mr of the reregistered on-demand region: %s",
          strerror(rc));
    ret = 0;
out:
    if (mr) {
        ibv_dereg_mr(mr);
    }
    free(b);
    free(a);
    return ret;
}

/* A region with a type 2 window bound to it: no rereg until it is unbound. */
static int rereg_bound(struct env *e, struct region *src, const char **note)
{
    const int access = IBV_ACCESS_MW_BIND | IBV_ACCESS_LOCAL_WRITE |
                       IBV_ACCESS_REMOTE_WRITE;
    struct region r = { 0 };
    struct pair p = { 0 };
    struct ibv_mw *mw = NULL;
    struct ibv_send_wr wr;
    struct ibv_wc wc;
    uint32_t lkey, rkey, k;
    int rc, ret = -1;

    if (!(e->attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW) ||
        !(e->attr.device_cap_flags &
          (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B))) {
        *note = " (window skipped: no type 2 memory windows)";
        return 0;
    }
    TRY(region_new(e->pd, &r, RR_LEN, access));
    TRY(connected_pair(e, &p, NULL));
    mw = ibv_alloc_mw(e->pd, IBV_MW_TYPE_2);
    CHECK(mw, "ibv_alloc_mw(TYPE_2): %s", strerror(errno));
    k = ibv_inc_rkey(mw->rkey);
    wr = (struct ibv_send_wr){
        .wr_id = 220, .opcode = IBV_WR_BIND_MW,
        .send_flags = IBV_SEND_SIGNALED,
        .bind_mw = {
            .mw = mw, .rkey = k,
            .bind_info = {
                .mr = r.mr, .addr = addr_of(r.buf + 1024),
                .length = 256,
                .mw_access_flags = IBV_ACCESS_REMOTE_WRITE,
            },
        },
    };
    TRY(post_and_wait(p.b, &wr, p.cq_b, &wc, 1));
    TRY(wc_ok(&wc, 220, IBV_WC_BIND_MW));

    lkey = r.mr->lkey;
    rkey = r.mr->rkey;
    errno = 0;
    rc = ibv_rereg_mr(r.mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
                      IBV_ACCESS_MW_BIND | IBV_ACCESS_LOCAL_WRITE);
    CHECK(rc && errno == EBUSY,
          "ibv_rereg_mr of a region with a bound window: %d, errno %s, "
          "expected a failure with EBUSY",
          rc, strerror(errno));
    CHECK(r.mr->lkey == lkey && r.mr->rkey == rkey,
          "the failed rereg changed the keys");
    fill(src->buf, 32, 221);
    TRY(write_through(e, src->buf, src->mr->lkey, r.buf + 64, r.mr->rkey, 221,
                      IBV_WC_SUCCESS,
                      "a WRITE into the region after the failed rereg"));
    /* Through the window: from the QP it is bound to (type 2B). */
    fill(src->buf, 32, 222);
    TRY(rdma_write(p.a, p.cq_a, src->buf, 32, src->mr->lkey,
                   addr_of(r.buf + 1024 + 32), k, 222, &wc));
    TRY(wc_ok(&wc, 222, IBV_WC_RDMA_WRITE));
    CHECK(!memcmp(r.buf + 1024 + 32, src->buf, 32),
          "a WRITE through the window after the failed rereg did not land");

    /* Unbound (the window deallocated), the region may be reregistered. */
    rc = ibv_dealloc_mw(mw);
    mw = NULL;
    CHECK(!rc, "ibv_dealloc_mw: %s", strerror(rc));
    TRY(rereg_ok(r.mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, access,
                 "CHANGE_ACCESS once the window is gone"));
    fill(src->buf, 32, 223);
    TRY(write_through(e, src->buf, src->mr->lkey, r.buf + 128, r.mr->rkey, 223,
                      IBV_WC_SUCCESS,
                      "a WRITE into the region reregistered"));
    CHECK(!pair_destroy(&p), "destroying the pair failed");
    CHECK(!region_free(&r), "ibv_dereg_mr of the reregistered region failed");
    ret = 0;
out:
    if (mw) {
        ibv_dealloc_mw(mw);
    }
    pair_destroy(&p);
    region_free(&r);
    return ret;
}

int check_rereg(struct env *e, const char **note)
{
    struct region src = { 0 };
    const char *odp_note = "", *mw_note = "";
    int ret = -1;

    TRY(region_new(e->pd, &src, RR_LEN, REMOTE_ALL));
    TRY(rereg_pinned(e, &src));
    TRY(rereg_odp(e, &src, &odp_note));
    TRY(rereg_bound(e, &src, &mw_note));
    *note = odp_note[0] ? odp_note : mw_note;
    ret = 0;
out:
    region_free(&src);
    return ret;
}
