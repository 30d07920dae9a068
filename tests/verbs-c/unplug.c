// SPDX-License-Identifier: GPL-2.0-only OR MIT
/*
 * unplug: RDMA WRITEs in a loop while the device goes away under the
 * process (qhca-vmtest removes it once it reads the "traffic" line).
 * Expected of a RoCE device and its provider, as of any other: the
 * asynchronous event file gives IBV_EVENT_DEVICE_FATAL; the loop ends (a
 * completion that never comes is waited for a bounded time; a post after the
 * loss does not fault); and every object can be destroyed afterwards
 * (libibverbs takes the removed device's EIO for "destroyed").
 *
 * Prints "unplug: DEVICE_FATAL after N ops, every object destroyed" and
 * exits 0; otherwise says why on stderr and exits 1.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "verbs_check.h"

/* How long a completion may take before the loop gives up waiting for it. */
#define STALL_MS 2000
/* How long the fatal event may take after the loop stopped. */
#define FATAL_MS 10000

static atomic_int fatal;

/* Reads asynchronous events until DEVICE_FATAL. */
static void *watch_events(void *arg)
{
    struct ibv_context *ctx = arg;
    struct ibv_async_event ev;

    while (!ibv_get_async_event(ctx, &ev)) {
        int kind = ev.event_type;

        ibv_ack_async_event(&ev);
        if (kind == IBV_EVENT_DEVICE_FATAL) {
            atomic_store(&fatal, 1);
            break;
        }
    }
    return NULL;
}

static int unplug_fail(const char *what)
{
    fprintf(stderr, "qhca-verbs-check unplug: %s\n", what);
    return 1;
}

int run_unplug(const char *name)
{
    struct ibv_send_wr wr, *bad;
    struct ibv_sge sge;
    struct ibv_wc wc;
    struct region r;
    struct pair p;
    struct env e;
    pthread_t watcher;
    uint64_t ops = 0;
    int64_t end;
    int rc, n;

    if (open_env(&e, name) || connected_pair(&e, &p, NULL) ||
        region_new(e.pd, &r, 1 << 16,
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) {
        return unplug_fail(why);
    }
    if (pthread_create(&watcher, NULL, watch_events, e.ctx)) {
        return unplug_fail("pthread_create");
    }
    sge = (struct ibv_sge){ addr_of(r.buf), 4096, r.mr->lkey };
    wr = (struct ibv_send_wr){
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_RDMA_WRITE,
        .send_flags = IBV_SEND_SIGNALED,
        .wr.rdma = { addr_of(r.buf + 32768), r.mr->rkey },
    };
    printf("traffic\n");
    fflush(stdout);
    /* Until the device is gone: a post fails, a completion fails or never comes. */
    while (!atomic_load(&fatal)) {
        wr.wr_id = ops;
        bad = NULL;
        if (ibv_post_send(p.a, &wr, &bad)) {
            break;
        }
        end = now_ms() + STALL_MS;
        do {
            n = ibv_poll_cq(p.cq_a, 1, &wc);
        } while (n == 0 && now_ms() < end && !atomic_load(&fatal));
        if (n != 1 || wc.status != IBV_WC_SUCCESS) {
            break;
        }
        ops++;
    }
    end = now_ms() + FATAL_MS;
    while (!atomic_load(&fatal) && now_ms() < end) {
        usleep(10000);
    }
    if (!atomic_load(&fatal)) {
        return unplug_fail("no IBV_EVENT_DEVICE_FATAL");
    }
    pthread_join(watcher, NULL);
    /* The doorbell page is the core's harmless one now: posting must not fault. */
    bad = NULL;
    (void)ibv_post_send(p.a, &wr, &bad);
    (void)ibv_poll_cq(p.cq_a, 1, &wc);

    rc = ibv_destroy_qp(p.a) || ibv_destroy_qp(p.b) ||
         ibv_destroy_cq(p.cq_a) || ibv_destroy_cq(p.cq_b) ||
         ibv_dereg_mr(r.mr) || ibv_dealloc_pd(e.pd);
    if (rc) {
        return unplug_fail("destroying the objects of a removed device failed");
    }
    if (ibv_close_device(e.ctx)) {
        return unplug_fail("ibv_close_device failed");
    }
    ibv_free_device_list(e.list);
    printf("unplug: DEVICE_FATAL after %" PRIu64
           " ops, every object destroyed\n",
           ops);
    return 0;
}
